#!/usr/bin/python3
"""GRES GPUs (declared without devices) under real srun: what Slurm puts in CUDA_VISIBLE_DEVICES
for --gres, --gpus-per-node and --gpus-per-task, and which device dtlaunch gives each rank."""
import slurmtest

# name, allocation options (given to salloc, or to srun itself when None), srun options,
# dtlaunch options, world, expectation for each rank's view:
#   "node-wide": CVD is the step's whole list, DTLAUNCH_CUDA_DEVICE = LOCAL_RANK
#   "isolated":  CVD is one device, this rank's own, and DTLAUNCH_CUDA_DEVICE = 0
CASES = [
    ("--gres=gpu:2", None, ["-N2", "--ntasks-per-node=2", "--gres=gpu:2"], [], 4, "node-wide"),
    ("--gpus-per-node=2", None, ["-N2", "--ntasks-per-node=2", "--gpus-per-node=2"], [], 4,
     "node-wide"),
    ("--gres=gpu:2 + dtlaunch --gpu-bind=isolate", None,
     ["-N2", "--ntasks-per-node=2", "--gres=gpu:2"], ["--gpu-bind=isolate"], 4, "isolated"),
    # Slurm narrows CVD to one device per task itself. In an allocation made with it, tasks also
    # inherit SLURM_GPUS_PER_TASK=1; a plain srun sets only SLURMD_TRES_BIND=gpu:per_task:1.
    ("salloc --gpus-per-task=1, srun", ["-N1", "--ntasks-per-node=2", "--gpus-per-task=1"], [],
     [], 2, "isolated"),
    ("srun --gpus-per-task=1", None, ["-N1", "--ntasks-per-node=2", "--gpus-per-task=1"], [], 2,
     "isolated"),
    # Slurm's own binding: one GPU per task (SLURMD_TRES_BIND=gpu:single:1), fewer than
    # SLURM_GPUS_ON_NODE=2, and no per-task count anywhere.
    ("srun --gpus-per-node=2 --gpu-bind=single:1", None,
     ["-N1", "--ntasks-per-node=2", "--gpus-per-node=2", "--gpu-bind=single:1"], [], 2,
     "isolated"),
]

ctx = slurmtest.Ctx(__doc__)
for i, (name, alloc, srun_opts, dt_opts, world, view) in enumerate(CASES):
    print(f"case {name}")
    out = ctx.outdir(f"case{i}")
    prefix = ["salloc"] + alloc if alloc else []
    p = ctx.run(prefix + ["srun"] + srun_opts + [ctx.dtlaunch] + dt_opts + ["--"] +
                ctx.probe_argv(out, "probe"), timeout=60)
    if not ctx.check(p.returncode == 0, f"{name}: srun rc={p.returncode}"):
        ctx.show(p)
        continue
    recs = ctx.records(out)
    host = slurmtest.check_step(ctx, recs, world, what=name)
    devices_per_node = {}
    for r, rec in sorted(recs.items()):
        cvd = rec.get("env.CUDA_VISIBLE_DEVICES")
        step_gpus = rec.get("env.SLURM_STEP_GPUS", "")  # what Slurm gave this task
        local = int(rec.get("env.LOCAL_RANK", -1))
        dev = rec.get("env.DTLAUNCH_CUDA_DEVICE")
        if view == "node-wide":
            ctx.eq(cvd, "0,1", f"{name}: rank {r} CUDA_VISIBLE_DEVICES")
            ctx.eq(dev, str(local), f"{name}: rank {r} DTLAUNCH_CUDA_DEVICE")
        else:
            ctx.check(cvd is not None and "," not in cvd, f"{name}: rank {r} CVD={cvd!r}, want one")
            ctx.eq(dev, "0", f"{name}: rank {r} DTLAUNCH_CUDA_DEVICE")
            devices_per_node.setdefault(host.get(r), []).append(cvd)
            if dt_opts:  # dtlaunch narrowed Slurm's list: this rank's entry of it
                ctx.eq(cvd, step_gpus.split(",")[local], f"{name}: rank {r} isolated device")
    for node, devs in devices_per_node.items():
        ctx.eq(len(set(devs)), len(devs), f"{name}: distinct devices on {node} ({devs})")
ctx.finish()
