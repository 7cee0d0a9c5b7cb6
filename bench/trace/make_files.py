#!/usr/bin/env python3
"""Writes RANKS flight-record files of ENTRIES entries each into DIR, in the runtime's format
(rank 700 straggles by 4 ms every 3rd collective), for `dtlaunch trace`'s scale measurement
(docs/benchmarks.md). Usage: make_files.py DIR [RANKS=1024] [ENTRIES=2000]"""
import json, os, random, sys

directory = sys.argv[1]
ranks = int(sys.argv[2]) if len(sys.argv) > 2 else 1024
entries = int(sys.argv[3]) if len(sys.argv) > 3 else 2000
os.makedirs(directory, exist_ok=True)
rng = random.Random(1)
base = 1_800_000_000_000_000
# One common schedule; each rank adds its own jitter.
schedule = [base + seq * 5_000 for seq in range(1, entries + 1)]
for rank in range(ranks):
    head = {"format": "dtlaunch-flight-record", "version": 2, "run_id": "slurm-4242.0",
            "attempt": 0, "rank": rank, "world_size": ranks, "local_rank": rank % 8,
            "host": "node%04d" % (rank // 8), "kind": "signal", "reason": "SIGUSR2",
            "dumped_at_us": schedule[-1] + 10_000, "clock_offset_us": rng.randint(-300, 300),
            "clock_error_us": rng.randint(20, 120), "collectives_started": entries,
            "entries_capacity": entries}
    lines = []
    for seq, t in enumerate(schedule, 1):
        enq = t + rng.randint(0, 400) + (4_000 if rank == 700 and seq % 3 == 0 else 0)
        lines.append('  {"seq": %d, "op": "all_reduce", "dtype": "float32", "numel": 6553600, '
                     '"shape": [6553600], "root": -1, "enqueue_us": %d, "start_us": %d, '
                     '"end_us": %d, "state": "completed"}' % (seq, enq, enq, t + 4_800))
    with open(os.path.join(directory, "slurm-4242.0.a0.rank-%d.json" % rank), "w") as f:
        f.write(json.dumps(head)[:-1] + ',\n "entries": [\n' + ",\n".join(lines) + "\n ]}\n")
