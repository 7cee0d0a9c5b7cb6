#!/usr/bin/python3
"""Scenario 3: python3-torch, unmodified, as the client of dtlaunch's contract: gloo over env://,
rendezvous at the master node's address across the node namespaces, all-reduce of the ranks."""
import json
import os

import slurmtest

ctx = slurmtest.Ctx(__doc__)
client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_allreduce.py")
out = ctx.outdir("torch")
world = 6
p = ctx.srun(["-N3", "-n6", "--ntasks-per-node=2", "--kill-on-bad-exit=1"],
             ["/usr/bin/python3", client, out], timeout=100)
print(f"srun rc={p.returncode} in {p.elapsed:.1f} s")
if not ctx.check(p.returncode == 0, f"srun rc={p.returncode}"):
    ctx.show(p)
files = sorted(f for f in os.listdir(out) if f.endswith(".json"))
ctx.eq(len(files), world, "ranks that finished the all-reduce")
results = [json.load(open(os.path.join(out, f))) for f in files]
for r in results:
    ctx.eq(r["sum"], r["want"], f"rank {r['rank']}: all-reduced sum")
    ctx.eq(r["world"], world, f"rank {r['rank']}: world size")
if results:
    hosts = results[0]["hosts"]  # host of every rank, gathered through the process group
    ctx.eq(hosts, [ctx.node(1)] * 2 + [ctx.node(2)] * 2 + [ctx.node(3)] * 2, "hosts by rank")
    ctx.eq({r["master"] for r in results}, {hosts[0]}, "MASTER_ADDR: rank 0's node")
    ctx.eq(len({r["port"] for r in results}), 1, "one MASTER_PORT")
ctx.finish()
