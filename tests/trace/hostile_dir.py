#!/usr/bin/env python3
"""`dtlaunch trace DIR` on a directory that holds, next to one good flight record, things named
like flight records that are not: a FIFO (no writer), a FIFO that a writer floods, a symlink to
/dev/zero, a symlink loop, a directory, and a 1000 MB sparse file of zeros. Each is skipped with
one line of the verdict naming it, the good record still makes the verdict, and it all takes bounded time and
memory (the sparse file was read whole to learn that its first byte is wrong: 1 GB of RSS).

Also the command line: a first `--` ends the options (as for `hostnames --`), and one DIR is
all trace takes: a second one, or options after `--`, are refused (they were ignored).

Usage: hostile_dir.py DTLAUNCH"""
import json, os, resource, subprocess, sys, tempfile, time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import records  # noqa: E402  (tests/trace/records.py)

MAX_SECONDS = 10
MAX_RSS_MB = 200  # a few MB when healthy (more under the sanitizers); the sparse file is 1000


def good_record():
    return records.good_record("hostile", 2_000_000_000_000_000)


def check_command_line(dtlaunch, d, failures):
    cases = [(["trace", "--", d], 0), (["trace", "--format", "json", "--", d], 0),
             (["trace", d, "--"], 0), (["trace", d, d], 2), (["trace", "--", d, "--format", "json"], 2),
             (["trace", d, "--", "x"], 2)]
    for args, want in cases:
        run = subprocess.run([dtlaunch] + args, capture_output=True, text=True, timeout=30)
        lines = run.stderr.splitlines()
        ok = run.returncode == want and (want == 0 or (len(lines) == 1 and
                                                        lines[0].startswith("dtlaunch: ")))
        print("%s: exit %d %s" % (" ".join(args), run.returncode, run.stderr[-200:].strip()))
        if not ok:
            failures.append("dtlaunch %s: exit %d, expected %d with one line" %
                            (" ".join(args), run.returncode, want))


def main():
    dtlaunch = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="dtlaunch-trace-hostile-") as d:
        with open(os.path.join(d, "rank-0.hostile.0.json"), "w") as f:
            f.write(good_record())
        os.mkfifo(os.path.join(d, "fifo.json"))
        flooded = os.path.join(d, "flooded.json")
        os.mkfifo(flooded)
        os.symlink("/dev/zero", os.path.join(d, "zero.json"))
        os.symlink("loop.json", os.path.join(d, "loop.json"))
        os.mkdir(os.path.join(d, "dir.json"))
        with open(os.path.join(d, "sparse.json"), "wb") as f:
            f.truncate(1000 << 20)
        # A writer that keeps the FIFO open and full while dtlaunch looks at it.
        writer = subprocess.Popen(["sh", "-c", 'exec yes > "$0"', flooded])
        try:
            start = time.monotonic()
            run = subprocess.run([dtlaunch, "trace", d], capture_output=True, text=True,
                                 timeout=60)
            elapsed = time.monotonic() - start
        finally:
            writer.kill()
            writer.wait()
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(run.stdout + run.stderr)
        print("exit %d in %.2f s, max RSS of a child %.0f MB" % (run.returncode, elapsed, rss_mb))
        if run.returncode != 0:
            failures.append("exit %d, expected 0 (the good record is healthy)" % run.returncode)
        for name in ["fifo.json", "flooded.json", "zero.json", "loop.json", "dir.json",
                     "sparse.json"]:
            lines = [l for l in run.stdout.splitlines() if l.startswith("skipped: " + name + ": ")]
            if len(lines) != 1:
                failures.append("%s: %d 'skipped' lines in the verdict, expected 1" %
                                (name, len(lines)))
        if elapsed > MAX_SECONDS:
            failures.append("took %.1f s (bound %d s)" % (elapsed, MAX_SECONDS))
        if rss_mb > MAX_RSS_MB:
            failures.append("max RSS %.0f MB (bound %d MB)" % (rss_mb, MAX_RSS_MB))
        check_command_line(dtlaunch, d, failures)
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
