#!/usr/bin/python3
"""Signals to `dtlaunch job` (issue 35 C, E), on 2 nodes of the test cluster:
- SIGTERM to the driver reaches the program as SIGTERM: a program that traps it, says so and
  exits 75 (checkpoint and stop, as the example does) makes the job exit 75, preempted, with no
  culprit named. Before, the driver passed SIGTERM to srun, which answered "forcing job
  termination": the tasks were SIGKILLed, the job exited 137 and the program never saw TERM.
- SIGKILL of the driver ends the step: srun has a parent-death signal (SIGTERM, which srun
  answers by ending the step). Before, srun was orphaned and the step ran on with no driver."""
import os
import signal
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)


def wait_for(path, timeout, text=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            if text is None or text in open(path, errors="replace").read():
                return True
        time.sleep(0.1)
    return False


def running_steps(job):
    out = ctx.run(["squeue", "-h", "-s", "-j", job, "-o", "%i"], timeout=10).stdout.split()
    return [s for s in out if s.split(".")[-1].isdigit()]


def start(name, program_text):
    """Submits `dtlaunch job -- PROGRAM` on 2 nodes; returns (job id, work dir)."""
    work = ctx.outdir(name)
    for f in ("pid", "status", "out", "err"):
        if os.path.exists(os.path.join(work, f)):
            os.remove(os.path.join(work, f))
    program = os.path.join(work, "program.sh")
    with open(program, "w") as f:
        f.write(program_text.format(work=work))
    os.chmod(program, 0o755)
    batch = os.path.join(work, "job.sbatch")
    with open(batch, "w") as f:
        f.write(f"""#!/bin/bash
"$DTLAUNCH" job --stop-grace 10 -- {program} & echo $! > {work}/pid; wait $!
echo $? > {work}/status
sleep 120  # the batch step lives on: its end would take the job's steps with it
""")
    p = ctx.run(["sbatch", "--parsable", f"--chdir={work}", "--nodes=2", "--ntasks-per-node=1",
                 f"--output={work}/out", f"--error={work}/err", batch],
                env={"DTLAUNCH": ctx.dtlaunch}, timeout=20)
    ctx.eq(p.returncode, 0, f"{name}: sbatch rc ({p.stderr.strip()})")
    return p.stdout.strip().split(";")[0], work


# A program that checkpoints on SIGTERM: each task says it started, then waits; on TERM it says
# so and exits 75.
TRAPS_TERM = """#!/bin/sh
trap 'echo "task $SLURM_PROCID got TERM"; exit 75' TERM
echo "task $SLURM_PROCID started"
while :; do sleep 0.2; done
"""

print("case SIGTERM reaches the program")
job, work = start("term", TRAPS_TERM)
try:
    out = os.path.join(work, "out")
    if ctx.check(wait_for(os.path.join(work, "pid"), 30) and
                 wait_for(out, 30, "task 1 started") and wait_for(out, 5, "task 0 started"),
                 "term: both tasks started"):
        driver = int(open(os.path.join(work, "pid")).read())
        os.kill(driver, signal.SIGTERM)
        exited = wait_for(os.path.join(work, "status"), 10 + 5 + 10 + 10)
        if ctx.check(exited, "term: dtlaunch job exited"):
            text = open(out).read()
            err = open(os.path.join(work, "err")).read()
            ctx.eq(open(os.path.join(work, "status")).read().strip(), "75",
                   f"term: exit 75 passed through: {err[-1500:]}")
            for rank in (0, 1):
                ctx.check(f"task {rank} got TERM" in text, f"term: task {rank} saw SIGTERM: {text}")
            ctx.check("culprit none" in err, f"term: no culprit named: {err[-1500:]}")
finally:
    ctx.run(["scancel", job], timeout=10)

print("case SIGKILL of the driver ends the step")
job, work = start("kill", TRAPS_TERM)
try:
    out = os.path.join(work, "out")
    if ctx.check(wait_for(os.path.join(work, "pid"), 30) and wait_for(out, 30, "task 1 started"),
                 "kill: the tasks started"):
        ctx.check(len(running_steps(job)) == 1, "kill: one step running")
        driver = int(open(os.path.join(work, "pid")).read())
        t0 = time.monotonic()
        os.kill(driver, signal.SIGKILL)
        steps = running_steps(job)
        while steps and time.monotonic() - t0 < 20:
            time.sleep(0.3)
            steps = running_steps(job)
        print(f"  the step was gone {time.monotonic() - t0:.1f} s after the SIGKILL: {not steps}")
        ctx.eq(steps, [], "kill: no step left running once the driver is killed")
finally:
    ctx.run(["scancel", job], timeout=10)
    if ctx.failures:
        for name in ("term", "kill"):
            for f in ("out", "err"):
                path = os.path.join(ctx.outdir(name), f)
                if os.path.exists(path):
                    print(f"--- {name}/{f}\n" + open(path, errors="replace").read()[-2000:])
ctx.finish()
