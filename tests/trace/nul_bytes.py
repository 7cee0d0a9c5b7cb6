#!/usr/bin/env python3
"""`dtlaunch trace DIR` on flight records whose run id and host hold a NUL byte (\\u0000 in the
file's JSON): every output quotes it as \\x00, none writes the byte itself (issue 35 E: the text
verdict, its copy on stderr with --format chrome and the --html page wrote it raw).

Usage: nul_bytes.py DTLAUNCH"""
import json, os, subprocess, sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import records  # noqa: E402  (tests/trace/records.py)

RUN = "run\0id"
HOST = "node\0" + "01"


def record(rank, seqs):
    head = {"format": "dtlaunch-flight-record", "version": 2, "run_id": RUN, "attempt": 0,
            "rank": rank, "world_size": 2, "local_rank": rank, "host": HOST, "kind": "exit",
            "reason": "exit", "dumped_at_us": 10_000_000, "clock_offset_us": 0,
            "clock_error_us": 30, "collectives_started": seqs, "entries_capacity": 2000}
    entries = ",\n".join(
        '  {"seq": %d, "op": "barrier", "dtype": "float32", "numel": 0, "shape": [], "root": -1, '
        '"enqueue_us": %d, "start_us": %d, "end_us": %d, "state": "%s"}' %
        (s, s * 1000, s * 1000, 0 if s == 2 else s * 1000 + 500,
         "started" if s == 2 else "completed") for s in range(1, seqs + 1))
    # json.dumps writes the NUL as \u0000; the reader gives the byte back.
    return json.dumps(head)[:-1] + ',\n "entries": [\n' + entries + '\n ]}\n'


def main():
    dtlaunch = sys.argv[1]
    failures = []
    with records.traces_dir("dtlaunch-trace-nul-", "traces") as traces:
        d = os.path.dirname(traces)
        # Rank 0 waits in #2, which rank 1 never entered: the verdict names rank 1's host.
        for rank in (0, 1):
            with open(os.path.join(traces, "r.a0.rank-%d.json" % rank), "w") as f:
                f.write(record(rank, 2 - rank))
        page = os.path.join(d, "t.html")
        outputs = {}
        for name, args in (("text", []), ("chrome", ["--format", "chrome"]),
                           ("json", ["--format", "json"]), ("html", ["--html", page])):
            run = subprocess.run([dtlaunch, "trace", traces] + args, capture_output=True,
                                 timeout=30)
            print("%s: exit %d\n%r\n%r" % (name, run.returncode, run.stdout[:600], run.stderr))
            if run.returncode != 3:
                failures.append("%s: exit %d, expected 3 (a divergence)" % (name, run.returncode))
            outputs[name + " stdout"], outputs[name + " stderr"] = run.stdout, run.stderr
        with open(page, "rb") as f:
            outputs["html page"] = f.read()
        for what, data in outputs.items():
            if b"\0" in data:
                failures.append("%s holds a raw NUL byte" % what)
        for what in ("text stdout", "chrome stderr", "html stdout"):
            for want in (b"run run\\x00id attempt 0", b"rank 1 (node\\x0001, local rank 1)"):
                if want not in outputs[what]:
                    failures.append("%s: no %r" % (what, want))
        if b"node\\x0001" not in outputs["html page"]:
            failures.append("html page: no 'node\\x0001'")
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
