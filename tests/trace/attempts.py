#!/usr/bin/env python3
"""`dtlaunch trace DIR --attempt N`: a restarted run's older attempt can be read (issue 35 E: `--run`
picked by run id only, and the "other run" hint named a command that read the newest attempt
again). A directory holds run "job-7" attempts 0 (2 ranks, rank 1 never entered #3) and 1 (2
ranks, healthy, newer) and run "old" attempt 0, under a directory name with a space. Checked:
- the default is the newest attempt; the hint for attempt 0, run through /bin/sh as printed,
  reads attempt 0 (its first line and its divergence);
- --attempt 0 alone selects attempt 0 of the newest run; --run old --attempt 0 reads "old";
- --attempt x, --attempt 5, --attempt -1 and an unknown --run: exit 2, one line on stderr naming
  the input and listing what exists, nothing on stdout.

Usage: attempts.py DTLAUNCH"""
import json, os, re, shlex, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import records  # noqa: E402  (tests/trace/records.py)


def record(run, attempt, rank, dumped_s, seqs):
    head = {"format": "dtlaunch-flight-record", "version": 2, "run_id": run, "attempt": attempt,
            "rank": rank, "world_size": 2, "local_rank": rank, "host": "node%d" % rank,
            "kind": "exit", "reason": "exit", "dumped_at_us": dumped_s * 1_000_000,
            "clock_offset_us": 0, "clock_error_us": 30, "collectives_started": len(seqs),
            "entries_capacity": 2000}
    entries = ",\n".join(
        '  {"seq": %d, "op": "all_reduce", "dtype": "float32", "numel": 4, "shape": [4], '
        '"root": -1, "enqueue_us": %d, "start_us": %d, "end_us": %d, "state": "%s"}' %
        (s, 1000 * s, 1000 * s, 1000 * s + 300, state) for s, state in seqs)
    return json.dumps(head)[:-1] + ',\n "entries": [\n' + entries + "\n ]}\n"


def trace(dtlaunch, *args):
    r = subprocess.run([dtlaunch, "trace", *args], capture_output=True, text=True, timeout=60)
    print("$ dtlaunch trace %s\nexit %d\n%s%s" % (shlex.join(args), r.returncode, r.stdout,
                                                   r.stderr))
    return r


def main():
    dtlaunch = sys.argv[1]
    failures = []
    with records.traces_dir("dtlaunch-trace-attempts-", "my traces") as d:
        done = [(1, "completed"), (2, "completed"), (3, "completed")]
        files = {
            "job-7.a0.rank-0.json": record("job-7", 0, 0, 100, done[:2] + [(3, "started")]),
            "job-7.a0.rank-1.json": record("job-7", 0, 1, 100, done[:2]),
            "job-7.a1.rank-0.json": record("job-7", 1, 0, 200, done),
            "job-7.a1.rank-1.json": record("job-7", 1, 1, 200, done),
            "old.a0.rank-0.json": record("old", 0, 0, 50, done),
        }
        for name, text in files.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)

        first = "dtlaunch trace: %s: run %s attempt %d, 2 of 2 ranks"
        r = trace(dtlaunch, d)
        if r.returncode != 0 or not r.stdout.startswith(first % (d, "job-7", 1)):
            failures.append("default: exit %d, expected 0 and job-7 attempt 1" % r.returncode)
        hint = re.search(r"other run in the directory: job-7 attempt 0 \(2 files; (dtlaunch trace .*)\)\n",
                         r.stdout)
        if not hint:
            failures.append("default: no hint for job-7 attempt 0")
        else:
            cmd = hint.group(1).replace("dtlaunch", shlex.quote(dtlaunch), 1)
            h = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=60)
            print("$ %s\nexit %d\n%s%s" % (cmd, h.returncode, h.stdout, h.stderr))
            if h.returncode != 3 or not h.stdout.startswith(first % (d, "job-7", 0)) or \
                    "first divergence: all_reduce #3" not in h.stdout:
                failures.append("the hint's command: exit %d, expected 3 and attempt 0's "
                                "divergence" % h.returncode)

        r = trace(dtlaunch, d, "--attempt", "0")
        if r.returncode != 3 or not r.stdout.startswith(first % (d, "job-7", 0)):
            failures.append("--attempt 0: exit %d, expected 3 and job-7 attempt 0" % r.returncode)
        r = trace(dtlaunch, d, "--run", "old", "--attempt", "0", "--format", "json")
        if r.returncode != 3 or json.loads(r.stdout).get("run_id") != "old":  # rank 1 missing
            failures.append("--run old --attempt 0: exit %d, expected 3 and run old" % r.returncode)

        bad = [(["--attempt", "x"], "--attempt='x': expected one of the attempts of run 'job-7'"
                 " in '%s': 0, 1" % d),
               (["--attempt", "-1"], "--attempt='-1': expected one of the attempts"),
               (["--attempt", "5"], "--attempt='5': no such attempt; the attempts of run 'job-7'"
                " in '%s': 0, 1" % d),
               (["--run", "old", "--attempt", "1"], "--attempt='1': no such attempt; the attempts"
                " of run 'old' in '%s': 0" % d),
               (["--run", "nope"], "--run='nope': no flight record of that run in '%s'; runs "
                "there: 'job-7' (attempts 0, 1), 'old' (attempt 0)" % d)]
        for args, want in bad:
            r = trace(dtlaunch, d, *args)
            lines = r.stderr.splitlines()
            if r.returncode != 2 or r.stdout or len(lines) != 1 or want not in lines[0]:
                failures.append("%s: exit %d, stderr %r, expected 2 and one line with %r" %
                                (" ".join(args), r.returncode, r.stderr, want))
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
