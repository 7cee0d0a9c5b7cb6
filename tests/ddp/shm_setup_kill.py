#!/usr/bin/python3
"""SIGKILL of rank 0 inside the shared-memory set-up window (issue 26 item 20), measured by hand.

Runs 2 ranks of ddp_worker on loopback with the shm all_reduce, kills rank 0 as soon as its
segment appears in /dev/shm, and reports for each try whether the kill fell inside the window,
which segments were left, and rank 1's error. A segment left by one try is removed by the next
try's rank 0 (the name carries the dead creator's pid and start time; docs/ddp.md).

    /usr/bin/python3 tests/ddp/shm_setup_kill.py build/tests/ddp/ddp_worker [TRIES]
"""
import glob
import os
import random
import signal
import subprocess
import sys
import time

worker = sys.argv[1]
tries = int(sys.argv[2]) if len(sys.argv) > 2 else 5
for t in range(tries):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(30500 + random.randrange(2000)),
               WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", DTLAUNCH_DDP_SHM="1",
               DTLAUNCH_DDP_HEARTBEAT_TIMEOUT="3", DDP_TEST_TIMEOUT_MS="20000", OMP_NUM_THREADS="1")
    before = set(glob.glob("/dev/shm/dtlaunch-ddp-*"))
    ranks = [subprocess.Popen([worker, "rendezvous"], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for r in (0, 1)]
    mine = "/dev/shm/dtlaunch-ddp-%d-*" % ranks[0].pid
    start, inside = time.time(), False
    while time.time() - start < 30 and ranks[0].poll() is None:
        if glob.glob(mine):
            os.kill(ranks[0].pid, signal.SIGKILL)
            inside = True
            break
    out = [r.communicate()[0].decode() for r in ranks]
    removed = sorted(before - set(glob.glob("/dev/shm/dtlaunch-ddp-*")))
    error = [l for l in out[1].splitlines() if l.startswith("ERROR") or "error-after" in l]
    print("try %d: %s; left %s; removed earlier ones %s; rank 1: %s" %
          (t, "killed inside the window" if inside else "missed the window", glob.glob(mine),
           removed, " / ".join(error) or "completed"))
