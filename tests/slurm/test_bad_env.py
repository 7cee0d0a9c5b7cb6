#!/usr/bin/python3
"""Scenario 7: environments that real Slurm makes and dtlaunch must refuse at once with its
one-line error (exit 2), never a hang: fewer GPUs than tasks on a node; dtlaunch run in a batch
script without srun (the batch shell has SLURM_PROCID=0 but no step variables)."""
import os

import slurmtest

ctx = slurmtest.Ctx(__doc__)


def check_refusal(name, rc, elapsed, stderr_text, must_mention, out):
    lines = [l for l in stderr_text.splitlines() if l.startswith("dtlaunch: ")]
    ctx.eq(rc, 2, f"{name}: exit status")
    ctx.check(elapsed < 10, f"{name}: took {elapsed:.1f} s, want an immediate refusal")
    ctx.check(lines, f"{name}: no 'dtlaunch: ' line in {stderr_text!r}")
    for word in must_mention:
        ctx.check(any(word in l for l in lines), f"{name}: error does not mention {word!r}: {lines}")
    ctx.eq(os.listdir(out), [], f"{name}: the program must not have run")
    print(f"  {name}: rc={rc} in {elapsed:.2f} s: {lines[:1]}")


# 4 tasks on one node sharing 2 GPUs.
out = ctx.outdir("gpus")
p = ctx.srun(["-N1", "--ntasks-per-node=4", "--gres=gpu:2"], ctx.probe_argv(out), timeout=30)
check_refusal("4 tasks, --gres=gpu:2", p.returncode, p.elapsed, p.stderr, ["GPU"], out)

# dtlaunch straight in the batch script: no srun, so there is no step.
out = ctx.outdir("batch")
script = os.path.join(ctx.work, "no-srun.sbatch")
with open(script, "w") as f:
    f.write("#!/bin/bash\n"
            f"exec {ctx.dtlaunch} -- {ctx.probe} --out {out}\n")
log = os.path.join(ctx.work, "no-srun.out")
p = ctx.run(["sbatch", "--wait", "-N2", "--ntasks-per-node=2", "-o", log, script], timeout=60)
text = open(log).read() if os.path.exists(log) else ""
job = p.stdout.split()[-1] if p.stdout.split() else ""
info = ctx.scontrol_job(job) if job else {}
print(f"  sbatch: rc={p.returncode} in {p.elapsed:.2f} s, job {job}: "
      f"{info.get('JobState')} ExitCode={info.get('ExitCode')}")
ctx.eq(info.get("ExitCode"), "2:0", "batch job exit code as Slurm records it")
# sbatch --wait itself takes a scheduling round; the refusal inside is what must be immediate.
check_refusal("dtlaunch in a batch script without srun", p.returncode, 0, text, ["srun"], out)
ctx.finish()
