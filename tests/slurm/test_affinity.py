#!/usr/bin/python3
"""--cpu-bind under real srun: every task binds itself before exec, the tasks of a node divide
the CPUs they share, and a mask narrowed before dtlaunch starts is kept. The test cluster runs
TaskPlugin=task/none (Slurm binds nothing itself), so the narrower mask comes from taskset
between srun and dtlaunch, the place Slurm's own binding would act."""
import slurmtest


def cpus(text):
    out = set()
    for part in filter(None, (text or "").split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


ctx = slurmtest.Ctx(__doc__)

print("case: srun -N1 -n2 dtlaunch --cpu-bind exclusive")
out = ctx.outdir("exclusive")
p = ctx.run(["srun", "-N1", "--ntasks-per-node=2", ctx.dtlaunch, "--cpu-bind", "exclusive", "--"]
            + ctx.probe_argv(out), timeout=60)
if not ctx.check(p.returncode == 0, f"exclusive: srun rc={p.returncode}"):
    ctx.show(p)
else:
    recs = ctx.records(out)
    slurmtest.check_step(ctx, recs, 2, what="exclusive")
    sets = {r: cpus(rec.get("probe.cpus")) for r, rec in recs.items()}
    for r, s in sets.items():
        ctx.check(bool(s), f"exclusive: rank {r} has CPUs ({recs[r].get('probe.cpus')!r})")
        ctx.eq(recs[r].get("env.CUDA_DEVICE_ORDER"), "PCI_BUS_ID", f"exclusive: rank {r} order")
        ctx.check(recs[r].get("env.OMP_NUM_THREADS", "").isdigit(), f"exclusive: rank {r} OMP")
    both = list(sets.values())
    ctx.check(len(both) == 2 and not both[0] & both[1], f"exclusive: ranks share no CPU ({sets})")

print("case: srun -N1 -n2 taskset -c 1 dtlaunch --cpu-bind numa")
out = ctx.outdir("narrowed")
p = ctx.run(["srun", "-N1", "--ntasks-per-node=2", "taskset", "-c", "1", ctx.dtlaunch,
             "--cpu-bind", "numa", "--"] + ctx.probe_argv(out), timeout=60)
if not ctx.check(p.returncode == 0, f"narrowed: srun rc={p.returncode}"):
    ctx.show(p)
else:
    recs = ctx.records(out)
    for r, rec in recs.items():
        ctx.eq(rec.get("probe.cpus"), "1", f"narrowed: rank {r} keeps the inherited CPU 1")
ctx.finish()
