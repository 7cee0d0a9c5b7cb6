#!/usr/bin/python3
"""Scenario 6: the sbatch templates in scripts/sbatch/, submitted for real with sbatch, waited
for, and their output checked. First, every template submitted exactly as its `# Submit:` line
says must fit the test nodes (4 CPUs and 4 fake GPUs each): sbatch accepts a request no node can
meet and leaves it pending forever (issue 35: resilient.sbatch asked 4 tasks x 8 CPUs per node),
so `sbatch --test-only` must find it a start. Then only the sizes are overridden on the sbatch
command line; job names, time limits, output files, signal and requeue come from the templates'
own #SBATCH lines. The program is the probe (test_sbatch_train.py runs dtlaunch-train in them)."""
import os

import slurmtest

ctx = slurmtest.Ctx(__doc__)
SIZES = ["--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=2"]
def probe_env(out, *extra):
    return {"DTLAUNCH": ctx.dtlaunch, "TRAIN": ctx.probe,
            "TRAIN_ARGS": " ".join(["--out", out, "--rendezvous"] + list(extra))}


# ---- each template as its header says to submit it fits the nodes -------------------------------
templates = os.path.join(ctx.repo, "scripts", "sbatch")
for name in sorted(n for n in os.listdir(templates) if n.endswith(".sbatch")):
    path = os.path.join(templates, name)
    with open(path) as f:
        submit = [line for line in f if line.startswith("# Submit: sbatch ")]
    if not ctx.eq(len(submit), 1, f"{name}: '# Submit: sbatch ...' lines"):
        continue
    # "# Submit: sbatch -N4 scripts/sbatch/resilient.sbatch   # trains on 3 nodes, 1 spare"
    options = [w for w in submit[0].split("#")[1].split()[2:] if w.startswith("-")]
    command = " ".join(["sbatch"] + options + [name])
    p = ctx.run(["sbatch", "--test-only"] + options + [path], timeout=20)
    print(f"template {name}: {command} --test-only: {p.stderr.strip()}")
    ctx.check(p.returncode == 0 and " to start at " in p.stderr,
              f"{name}: `{command}`, as its header says, fits no test node (4 CPUs, 4 GPUs): "
              f"{p.stderr.strip()!r}")

# ---- single node ------------------------------------------------------------------------------
print("template single-node.sbatch")
out = ctx.outdir("single")
job, info, text, err = slurmtest.submit(ctx, "single-node.sbatch", SIZES, probe_env(out), 60)
slurmtest.check_done(ctx, "single-node", info, text, err, "dtlaunch-1node", "01:00:00")
recs = ctx.records(out)
slurmtest.check_step(ctx, recs, 2, [0, 0], what="single-node")
for r, rec in recs.items():
    ctx.eq(rec.get("env.OMP_NUM_THREADS"), "2", f"single-node: rank {r} OMP_NUM_THREADS")
    ctx.eq(rec.get("env.CUDA_VISIBLE_DEVICES"), "0,1", f"single-node: rank {r} CVD")
    ctx.eq(rec.get("env.DTLAUNCH_CUDA_DEVICE"), str(r), f"single-node: rank {r} device")
ctx.check(f"job {job} on " in text, f"single-node: the script's own line in the output: {text!r}")

# ---- several nodes ----------------------------------------------------------------------------
print("template multi-node.sbatch")
out = ctx.outdir("multi")
job, info, text, err = slurmtest.submit(ctx, "multi-node.sbatch", SIZES, probe_env(out), 60)
slurmtest.check_done(ctx, "multi-node", info, text, err, "dtlaunch-nnode", "04:00:00")
ctx.eq(info.get("NumNodes"), "2", "multi-node: nodes from the template")
slurmtest.check_step(ctx, ctx.records(out), 4, [0, 0, 1, 1], what="multi-node")

# ---- preemptible: the real --signal timer, checkpoint, exit 75, requeue, resume ---------------
# slurmctld checks signals on a 30 s timer and sends at the last check before the due time, so up
# to 30 s early. Each run here may last two minutes and asks for USR1 85 s before the end, i.e.
# 35 s in: it comes 5-35 s into the run, after srun has started the step (a step signal sent
# before any step exists would reach nobody) and long before the limit. The probe models the
# trainer: on USR1 it writes the checkpoint and exits 75; a run that finds it finishes at once.
print("template preemptible.sbatch")
out = ctx.outdir("preempt")
ckpt = os.path.join(out, "ckpt")
env = probe_env(out, "--tag", "run{restart}", "--hold", "115", "--exit-on-signal", "75",
                "--checkpoint", ckpt)
job, info, text, err = slurmtest.submit(ctx, "preemptible.sbatch",
                                        ["--nodes=1", "--time=2", "--signal=USR1@85"] + SIZES,
                                        env, 150)
slurmtest.check_done(ctx, "preemptible", info, text, err, "dtlaunch-preempt", "00:02:00")
ctx.eq(info.get("Restarts"), "1", "preemptible: requeued once")
ctx.eq(info.get("Requeue"), "1", "preemptible: --requeue from the template")
sigs = ctx.records(out, "run0", ".signal")
ctx.eq({r: s.get("signal") for r, s in sigs.items()}, {0: "SIGUSR1", 1: "SIGUSR1"},
       "preemptible: USR1 reached every rank of the first run")
ctx.eq({s.get("sender_comm") for s in sigs.values()}, {"slurmstepd"},
       "preemptible: the USR1 came from slurmstepd, straight to the program")
first = ctx.records(out, "run0")
second = ctx.records(out, "run1")
ctx.eq(sorted(second), [0, 1], "preemptible: ranks of the second run")
for r, rec in second.items():
    ctx.eq(rec.get("probe.resumed"), "1", f"preemptible: rank {r} of run 2 found the checkpoint")
    ctx.eq(rec.get("env.SLURM_RESTART_COUNT"), "1", f"preemptible: rank {r} SLURM_RESTART_COUNT")
if 0 in sigs and 0 in first:
    delay = float(sigs[0]["time"]) - float(first[0]["probe.start"])
    print(f"  USR1 arrived {delay:.1f} s into the first run")
for line in ("run 1 on", "run 1: srun exit status 75", "requeueing", "run 2 on",
             "run 2: srun exit status 0"):
    ctx.check(line in text, f"preemptible: no {line!r} in the appended output:\n{text}")

ctx.finish()
