#!/usr/bin/python3
"""The sbatch templates running the example trainer (dtlaunch-train, LibTorch, gloo) for real:
the multi-node template trains a few synthetic steps; the preemptible template is interrupted by
SIGUSR1 in the middle of training, checkpoints, exits 75, requeues itself and resumes from the
checkpoint to the end. Registered only in builds that have dtlaunch-train."""
import os
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
if not ctx.args.train:
    ctx.fail("--train is required")
    ctx.finish()
train = os.path.abspath(ctx.args.train)
one_cpu = ["--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=1"]

print("template multi-node.sbatch with dtlaunch-train")
env = {"DTLAUNCH": ctx.dtlaunch, "TRAIN": train,
       "TRAIN_ARGS": "--synthetic 256 --batch-size 16 --max-steps 8 --log-every 4"}
job, info, text, err = slurmtest.submit(ctx, "multi-node.sbatch", one_cpu, env, 120)
slurmtest.check_done(ctx, "multi-node train", info, text, err, "dtlaunch-nnode", "04:00:00")
ctx.check("4 rank(s)" in text, f"multi-node train: 4 ranks in rank 0's banner:\n{text}")
ctx.check("done: 8 steps" in text, f"multi-node train: 8 steps done:\n{text}")


def signal_when_training(job):
    """Sends SIGUSR1 to every task of the job (as the --signal timer does, through scancel) once
    rank 0 logged a training step, so the first run is interrupted mid-training by construction."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        out = ctx.scontrol_job(job).get("StdOut", "")
        if out and os.path.exists(out) and " loss " in open(out).read():
            s = ctx.run(["scancel", "--signal=USR1", job], timeout=20)
            ctx.eq(s.returncode, 0, f"preemptible train: scancel rc ({s.stderr.strip()})")
            return
        time.sleep(0.1)
    ctx.fail("preemptible train: no training step logged within 90 s")


print("template preemptible.sbatch with dtlaunch-train")
ckpt = os.path.join(ctx.outdir("preempt-train"), "train.ckpt")
# One epoch: 32000 samples per rank in batches of 64, about 10 s on an idle 2-CPU VM. Batches of
# 8 took about 3 s on a fast VM, and a loaded CI run finished the epoch before scancel's signal
# reached the job (on an idle machine the signal lands about 3 steps after the first log line).
samples, batch = 32000, 64
steps = samples // batch
env = {"DTLAUNCH": ctx.dtlaunch, "TRAIN": train,
       "TRAIN_ARGS": f"--synthetic {samples} --batch-size {batch} --epochs 1 --log-every 10 "
                     f"--checkpoint {ckpt} --resume"}
job, info, text, err = slurmtest.submit(ctx, "preemptible.sbatch", ["--nodes=1"] + one_cpu, env,
                                        150, before_wait=signal_when_training)
slurmtest.check_done(ctx, "preemptible train", info, text, err, "dtlaunch-preempt", "04:00:00")
ctx.eq(info.get("Restarts"), "1", "preemptible train: requeued once")
for needle in (f"checkpoint {ckpt} saved", "run 1: srun exit status 75", "requeueing",
               f"resumed from {ckpt}", f"done: {steps} steps", "run 2: srun exit status 0"):
    ctx.check(needle in text, f"preemptible train: no {needle!r} in the output")
if ctx.failures:
    print(text, err)
ctx.finish()
