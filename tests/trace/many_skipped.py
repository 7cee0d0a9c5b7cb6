#!/usr/bin/env python3
"""`dtlaunch trace DIR` on a directory of a few hundred junk *.json files: the skipped files are
listed up to a cap, in name order, then counted in one line (issue 35 E: 100,000 junk files gave
100,000 lines, 4.3 MB). Once next to a good record (the verdict on stdout, exit 0), once alone
(stderr, exit 66); --format json still lists every one.

Usage: many_skipped.py DTLAUNCH"""
import json, os, re, subprocess, sys, tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import records  # noqa: E402  (tests/trace/records.py)

JUNK = 300
LISTED = 20  # trace::kSkippedListed


def good_record():
    return records.good_record("junk", 10_000_000)


def check_list(what, text, prefix, failures):
    lines = [l for l in text.splitlines() if l.startswith(prefix)]
    names = [l[len(prefix):].split(":")[0] for l in lines]
    want = ["junk-%03d.json" % i for i in range(LISTED)]
    if names != want:
        failures.append("%s: %d skipped lines %s..., expected the first %d junk files" %
                        (what, len(names), names[:3], LISTED))
    more = re.findall(r"\.\.\. and (\d+) more skipped files", text)
    if more != [str(JUNK - LISTED)]:
        failures.append("%s: 'and N more skipped files' lines %s, expected [%d]" %
                        (what, more, JUNK - LISTED))
    if len(text.splitlines()) > LISTED + 10:
        failures.append("%s: %d lines" % (what, len(text.splitlines())))


def main():
    dtlaunch = sys.argv[1]
    failures = []
    with tempfile.TemporaryDirectory(prefix="dtlaunch-trace-skipped-") as d:
        for i in range(JUNK):
            with open(os.path.join(d, "junk-%03d.json" % i), "w") as f:
                f.write("not a flight record %d\n" % i)
        alone = subprocess.run([dtlaunch, "trace", d], capture_output=True, text=True, timeout=60)
        print("alone: exit %d\n%s%s" % (alone.returncode, alone.stdout, alone.stderr))
        if alone.returncode != 66:
            failures.append("junk alone: exit %d, expected 66" % alone.returncode)
        check_list("junk alone (stderr)", alone.stderr, "dtlaunch trace: skipped ", failures)

        with open(os.path.join(d, "rank-0.junk.0.json"), "w") as f:
            f.write(good_record())
        run = subprocess.run([dtlaunch, "trace", d], capture_output=True, text=True, timeout=60)
        print("with a record: exit %d\n%s%s" % (run.returncode, run.stdout, run.stderr))
        if run.returncode != 0:
            failures.append("with a record: exit %d, expected 0" % run.returncode)
        check_list("with a record (stdout)", run.stdout, "skipped: ", failures)

        js = subprocess.run([dtlaunch, "trace", d, "--format", "json"], capture_output=True,
                            text=True, timeout=60)
        skipped = json.loads(js.stdout).get("skipped", []) if js.returncode == 0 else []
        if len(skipped) != JUNK:
            failures.append("--format json: exit %d, %d skipped, expected %d" %
                            (js.returncode, len(skipped), JUNK))
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
