#!/usr/bin/python3
"""Scenario 8: --distribution=arbitrary puts rank 0 wherever SLURM_HOSTFILE says, here on the
second node of the (sorted) step node list. dtlaunch must take the master from the hostfile and
the job must rendezvous there; without a hostfile it must refuse at once and ask for
--master-addr; with --master-addr it must use that."""
import os

import slurmtest

ctx = slurmtest.Ctx(__doc__)
n1, n2, n3 = ctx.node(1), ctx.node(2), ctx.node(3)

hostfile = os.path.join(ctx.work, "hosts.arbitrary")
with open(hostfile, "w") as f:
    f.write(f"{n2}\n{n1}\n{n1}\n{n2}\n")

print("case SLURM_HOSTFILE: rank 0 on the second node")
out = ctx.outdir("hostfile")
p = ctx.srun(["-n4", "--distribution=arbitrary"], ctx.probe_argv(out, "probe", "--rendezvous"),
             env={"SLURM_HOSTFILE": hostfile}, timeout=60)
if not ctx.eq(p.returncode, 0, "hostfile: srun rc"):
    ctx.show(p)
recs = ctx.records(out)
slurmtest.check_step(ctx, recs, 4, placement=[1, 0, 0, 1], master_host=n2, what="hostfile")
if 0 in recs:
    ctx.eq(recs[0].get("env.SLURM_DISTRIBUTION"), "arbitrary", "what Slurm tells the task")

# The node order comes from -w instead: Slurm sets SLURM_DISTRIBUTION=arbitrary but no hostfile.
print("case -m arbitrary -w without SLURM_HOSTFILE")
out = ctx.outdir("nohostfile")
p = ctx.srun(["-n2", "-m", "arbitrary", "-w", f"{n3},{n1}"], ctx.probe_argv(out), timeout=30)
lines = [l for l in p.stderr.splitlines() if l.startswith("dtlaunch: ")]
print(f"  rc={p.returncode} in {p.elapsed:.2f} s: {lines[:1]}")
ctx.eq(p.returncode, 2, "no hostfile: exit status")
ctx.check(p.elapsed < 10, f"no hostfile: took {p.elapsed:.1f} s")
ctx.check(any("--master-addr" in l for l in lines), f"no hostfile: error asks for --master-addr")
ctx.eq(os.listdir(out), [], "no hostfile: the program must not have run")

print("case -m arbitrary -w with dtlaunch --master-addr")
out = ctx.outdir("masteraddr")
p = ctx.run(["srun", "-n2", "-m", "arbitrary", "-w", f"{n3},{n1}", ctx.dtlaunch,
             f"--master-addr={n3}", "--"] + ctx.probe_argv(out, "probe", "--rendezvous"),
            timeout=60)
if not ctx.eq(p.returncode, 0, "--master-addr: srun rc"):
    ctx.show(p)
slurmtest.check_step(ctx, ctx.records(out), 2, placement=[1, 0], master_host=n3,
                     what="--master-addr")
ctx.finish()
