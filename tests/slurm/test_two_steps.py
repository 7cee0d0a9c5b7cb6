#!/usr/bin/python3
"""Scenario 4: two steps of one job run at the same time on the same nodes. They must get
different MASTER_PORTs, and both must rendezvous while both masters hold their listening port."""
import slurmtest

ctx = slurmtest.Ctx(__doc__)
out = ctx.outdir("steps")
step = " ".join(["srun", "--exact", "-N3", "-n3", "--ntasks-per-node=1", ctx.dtlaunch, "--",
                 ctx.probe, "--out", out, "--rendezvous", "--linger", "2", "--tag"])
# salloc runs the shell on the submit host; both sruns become steps of its one job. Each srun is
# waited for by its pid: `wait -n` twice answers 127 when both steps ended before the first wait
# (a failed run of this scenario whose six ranks had all rendezvoused, stop 30).
script = f"{step} a & a=$!; {step} b & b=$!; wait $a || exit 1; wait $b || exit 1"
p = ctx.run(["salloc", "-N3", "--ntasks-per-node=2", "bash", "-c", script], timeout=60)
if not ctx.check(p.returncode == 0, f"salloc rc={p.returncode}"):
    ctx.show(p)
steps = {}
for tag in ("a", "b"):
    recs = ctx.records(out, tag)
    slurmtest.check_step(ctx, recs, 3, [0, 1, 2], what=f"step {tag}")
    if 0 in recs:
        steps[tag] = recs[0]
if len(steps) == 2:
    a, b = steps["a"], steps["b"]
    ctx.eq(a["env.SLURM_JOB_ID"], b["env.SLURM_JOB_ID"], "one job")
    ctx.check(a["env.SLURM_STEP_ID"] != b["env.SLURM_STEP_ID"], "two step ids")
    ctx.check(a["env.MASTER_PORT"] != b["env.MASTER_PORT"],
              f"MASTER_PORT a={a['env.MASTER_PORT']} b={b['env.MASTER_PORT']} must differ")
    ctx.eq(a["env.MASTER_ADDR"], b["env.MASTER_ADDR"], "same master node")
    # listen=<from>,<to> of each master: the two intervals overlap, so the ports coexisted.
    span = {t: [float(x) for x in s["probe.rendezvous"].split("listen=")[1].split(",")]
            for t, s in steps.items()}
    overlap = min(span["a"][1], span["b"][1]) - max(span["a"][0], span["b"][0])
    ctx.check(overlap > 0, f"the two masters listened at the same time (overlap {overlap:.2f} s)")
    print(f"ports a={a['env.MASTER_PORT']} b={b['env.MASTER_PORT']}, overlap {overlap:.2f} s")
ctx.finish()
