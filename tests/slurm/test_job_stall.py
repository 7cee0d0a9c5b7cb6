#!/usr/bin/python3
"""dtlaunch job whose stdout nobody reads (`dtlaunch job ... | sleep 600`) while the program writes
8 MB, then SIGTERM to dtlaunch job: a stalled reader must not stop supervision. The driver must end
the step and exit within its stop grace (--stop-grace 2, with the escalation's 5 s and a margin for
a loaded machine) with the status of a step ended by a signal, leave no step in squeue, and say in
one line on stderr that it drops the output nobody reads (docs/resilience.md). Before the fix the
driver sat in a blocking write() and never exited."""
import os
import signal
import subprocess
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
work = ctx.outdir("stall")
for name in ("pid", "status", "written"):
    if os.path.exists(os.path.join(work, name)):
        os.remove(os.path.join(work, name))
program = os.path.join(work, "chatty.sh")
with open(program, "w") as f:
    # 8 MB: more than the 4 MiB the driver keeps for a slow reader, plus every pipe and buffer on
    # the way (srun --label holds more: 5 MB left the driver 4.19 MB, just under its 4 MiB).
    f.write(f"#!/bin/sh\nhead -c 8000000 /dev/zero | tr '\\0' x | fold -w 99\n"
            f"echo done > {work}/written\nexec sleep 100\n")
os.chmod(program, 0o755)
batch = os.path.join(work, "stall.sbatch")
with open(batch, "w") as f:
    f.write(f"""#!/bin/bash
( "$DTLAUNCH" job --stop-grace 2 -- {program} & echo $! > {work}/pid; wait $!
  echo $? > {work}/status ) | sleep 600
""")
p = ctx.run(["sbatch", "--parsable", f"--chdir={work}", "--nodes=1", "--ntasks-per-node=1",
             f"--output={work}/out", f"--error={work}/err", batch],
            env={"DTLAUNCH": ctx.dtlaunch}, timeout=20)
ctx.eq(p.returncode, 0, f"sbatch rc ({p.stderr.strip()})")
job = p.stdout.strip().split(";")[0]


def wait_for(path, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return True
        time.sleep(0.1)
    return False


try:
    if ctx.check(wait_for(os.path.join(work, "pid"), 30), "dtlaunch job started"):
        driver = int(open(os.path.join(work, "pid")).read())
        # Once the program wrote everything the pipes are full; before the fix the program
        # itself blocks too, so this wait is bounded and the test goes on either way.
        t = time.monotonic()
        written = wait_for(os.path.join(work, "written"), 20)
        print(f"  the program wrote its 8 MB: {written} ({time.monotonic() - t:.1f} s)")
        t0 = time.monotonic()
        os.kill(driver, signal.SIGTERM)
        exited = wait_for(os.path.join(work, "status"), 2 + 5 + 5)
        took = time.monotonic() - t0
        print(f"  dtlaunch job exited {took:.1f} s after SIGTERM: {exited}")
        if ctx.check(exited, "dtlaunch job exits within its stop grace though stdout is stalled"):
            # srun ends the step on SIGTERM ("forcing job termination"): its task is killed, and
            # the driver passes on 128 + the signal (137 for SIGKILL, 143 for SIGTERM).
            status = open(os.path.join(work, "status")).read().strip()
            ctx.check(status in ("137", "143"), f"exit status 128 + a signal: {status}")
        steps = ctx.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], timeout=10).stdout.split()
        ctx.eq([s for s in steps if s.split(".")[-1].isdigit()], [], "no step left running")
        err = open(os.path.join(work, "err")).read()
        said = [l for l in err.splitlines() if "stdout is not being read" in l]
        ctx.eq(len(said), 1, f"one line says the output is dropped: {err[-2000:]}")
finally:
    ctx.run(["scancel", job], timeout=10)
    if ctx.failures:
        print(open(os.path.join(work, "err")).read()[-3000:] if os.path.exists(
            os.path.join(work, "err")) else "")
ctx.finish()
