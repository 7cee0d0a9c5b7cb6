#!/usr/bin/python3
"""Scenario 6: the sbatch templates in scripts/sbatch/, submitted for real with sbatch, waited
for, and their output checked. Only the sizes are overridden on the sbatch command line (the test
nodes have 4 CPUs and 4 fake GPUs); job names, time limits, output files, signal and requeue come
from the templates' own #SBATCH lines. The program is the probe, or dtlaunch-train when built."""
import os
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
templates = os.path.join(ctx.repo, "scripts", "sbatch")
SIZES = ["--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=2"]
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def submit(template, extra, env, timeout):
    """sbatch --parsable in the work dir, then poll scontrol until the job is final.
    Returns (job id, scontrol fields, stdout text, stderr text)."""
    path = os.path.join(templates, template)
    p = ctx.run(["sbatch", "--parsable", f"--chdir={ctx.work}"] + extra + [path], env=env,
                timeout=20)
    if not ctx.eq(p.returncode, 0, f"{template}: sbatch rc ({p.stderr.strip()})"):
        return None, {}, "", ""
    job = p.stdout.strip().split(";")[0]
    deadline = time.monotonic() + timeout
    info = {}
    while time.monotonic() < deadline:
        info = ctx.scontrol_job(job)
        if info.get("JobState") in FINAL:
            break
        time.sleep(0.25)
    else:
        ctx.fail(f"{template}: job {job} not done within {timeout} s: {info.get('JobState')}")
        ctx.run(["scancel", job], timeout=10)
    texts = []
    for key in ("StdOut", "StdErr"):
        f = info.get(key, "")
        texts.append(open(f).read() if f and os.path.exists(f) else "")
    print(f"  job {job}: {info.get('JobState')} ExitCode={info.get('ExitCode')} "
          f"Restarts={info.get('Restarts')} {info.get('StdOut')}")
    return job, info, texts[0], texts[1]


def check_done(name, info, out, err, want_name, want_limit):
    ctx.eq(info.get("JobState"), "COMPLETED", f"{name}: final state")
    ctx.eq(info.get("ExitCode"), "0:0", f"{name}: exit code")
    ctx.eq(info.get("JobName"), want_name, f"{name}: job name from the template")
    ctx.eq(info.get("TimeLimit"), want_limit, f"{name}: time limit from the template")
    ctx.check(os.path.basename(info.get("StdOut", "")).startswith(want_name + "-"),
              f"{name}: output file {info.get('StdOut')} named by the template's --output")
    ctx.check(not [l for l in err.splitlines() if l.startswith("dtlaunch: ")],
              f"{name}: dtlaunch errors in the job's stderr: {err!r}")
    if info.get("JobState") != "COMPLETED":
        print(out, err)


def probe_env(out, *extra):
    return {"DTLAUNCH": ctx.dtlaunch, "TRAIN": ctx.probe,
            "TRAIN_ARGS": " ".join(["--out", out, "--rendezvous"] + list(extra))}


# ---- single node ------------------------------------------------------------------------------
print("template single-node.sbatch")
out = ctx.outdir("single")
job, info, text, err = submit("single-node.sbatch", SIZES, probe_env(out), 60)
check_done("single-node", info, text, err, "dtlaunch-1node", "01:00:00")
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
job, info, text, err = submit("multi-node.sbatch", SIZES, probe_env(out), 60)
check_done("multi-node", info, text, err, "dtlaunch-nnode", "04:00:00")
ctx.eq(info.get("NumNodes"), "2", "multi-node: nodes from the template")
slurmtest.check_step(ctx, ctx.records(out), 4, [0, 0, 1, 1], what="multi-node")

if ctx.args.train:
    print("template multi-node.sbatch with dtlaunch-train")
    env = {"DTLAUNCH": ctx.dtlaunch, "TRAIN": os.path.abspath(ctx.args.train),
           "TRAIN_ARGS": "--synthetic 256 --batch-size 16 --max-steps 8 --log-every 4"}
    job, info, text, err = submit("multi-node.sbatch", SIZES[:2] + ["--cpus-per-task=1"], env, 90)
    check_done("multi-node train", info, text, err, "dtlaunch-nnode", "04:00:00")

# ---- preemptible: the real --signal timer, checkpoint, exit 75, requeue, resume ---------------
# Each run may last a minute; Slurm's timer checks signals about every 30 s, so USR1@55 arrives
# between 5 and ~35 s into the first run. The probe models the trainer: on USR1 it writes the
# checkpoint and exits 75; a run that finds the checkpoint finishes at once.
print("template preemptible.sbatch")
out = ctx.outdir("preempt")
ckpt = os.path.join(out, "ckpt")
env = probe_env(out, "--tag", "run{restart}", "--hold", "90", "--exit-on-signal", "75",
                "--checkpoint", ckpt)
job, info, text, err = submit("preemptible.sbatch",
                              ["--nodes=1", "--time=1", "--signal=USR1@55"] + SIZES, env, 110)
check_done("preemptible", info, text, err, "dtlaunch-preempt", "00:01:00")
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


def wait_for_text(path_of, needle, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = path_of()
        if path and os.path.exists(path) and needle in open(path).read():
            return True
        time.sleep(0.1)
    return False


# ---- preemptible with the real trainer: USR1 mid-training, checkpoint, requeue, resume ---------
# The signal is sent by the test (scancel --signal=USR1 signals every task of the job's steps,
# as the --signal timer does) once training runs, so the run is long enough by construction.
if ctx.args.train:
    print("template preemptible.sbatch with dtlaunch-train")
    ckpt = os.path.join(ctx.outdir("preempt-train"), "train.ckpt")
    steps = 3000
    env = {"DTLAUNCH": ctx.dtlaunch, "TRAIN": os.path.abspath(ctx.args.train),
           "TRAIN_ARGS": f"--synthetic 20000 --batch-size 8 --max-steps {steps} --log-every 10 "
                         f"--checkpoint {ckpt} --resume"}
    path = os.path.join(templates, "preemptible.sbatch")
    p = ctx.run(["sbatch", "--parsable", f"--chdir={ctx.work}", "--nodes=1",
                 "--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=1", path],
                env=env, timeout=20)
    job = p.stdout.strip()
    stdout_of = lambda: ctx.scontrol_job(job).get("StdOut")
    if ctx.check(wait_for_text(stdout_of, "loss", 60), "trainer: no progress line within 60 s"):
        s = ctx.run(["scancel", "--signal=USR1", job], timeout=20)
        ctx.eq(s.returncode, 0, f"trainer: scancel rc ({s.stderr.strip()})")
    deadline = time.monotonic() + 90
    info = {}
    while time.monotonic() < deadline:
        info = ctx.scontrol_job(job)
        if info.get("JobState") in FINAL:
            break
        time.sleep(0.25)
    out_text = open(info["StdOut"]).read() if os.path.exists(info.get("StdOut", "")) else ""
    err_text = open(info["StdErr"]).read() if os.path.exists(info.get("StdErr", "")) else ""
    print(f"  job {job}: {info.get('JobState')} ExitCode={info.get('ExitCode')} "
          f"Restarts={info.get('Restarts')}")
    check_done("preemptible train", info, out_text, err_text, "dtlaunch-preempt", "04:00:00")
    ctx.eq(info.get("Restarts"), "1", "trainer: requeued once")
    for needle in ("checkpoint " + ckpt + " saved", "run 1: srun exit status 75", "requeueing",
                   "resumed from " + ckpt, f"done: {steps} steps", "run 2: srun exit status 0"):
        ctx.check(needle in out_text, f"trainer: no {needle!r} in the output:\n{out_text}")
ctx.finish()
