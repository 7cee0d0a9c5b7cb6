#!/usr/bin/python3
"""One launcher per node under srun (`srun --ntasks-per-node=1 dtlaunch --nproc-per-node 2`):
the nodes, node rank, master and port come from Slurm, the workers are spawned locally, and all
ranks of all nodes meet over TCP at MASTER_ADDR:MASTER_PORT. Also the contradiction: the same
option inside a step with two tasks per node is refused at once (it would start 2 x 2 workers
per node)."""
import slurmtest

ctx = slurmtest.Ctx(__doc__)
nproc, nodes = 2, 3
out = ctx.outdir("per_node")
p = ctx.run(["srun", f"-N{nodes}", "--ntasks-per-node=1", ctx.dtlaunch, "--nproc-per-node",
             str(nproc), "--grace", "5", "--"] + ctx.probe_argv(out, "probe", "--rendezvous"),
            timeout=60)
if not ctx.check(p.returncode == 0, f"per-node: srun rc={p.returncode}"):
    ctx.show(p)
recs = ctx.records(out)
world = nproc * nodes
if ctx.eq(sorted(recs), list(range(world)), "per-node: ranks that wrote a record"):
    host = {r: rec["probe.hostname"] for r, rec in recs.items()}
    hosts = sorted(set(host.values()), key=slurmtest.node_sort_key)
    env = {r: {k[4:]: v for k, v in rec.items() if k.startswith("env.")} for r, rec in recs.items()}
    ctx.eq(len(hosts), nodes, "per-node: nodes used")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        ctx.eq(len({e.get(name) for e in env.values()}), 1, f"per-node: distinct {name} values")
    ctx.eq(env[0].get("MASTER_ADDR"), host[0], "per-node: MASTER_ADDR vs rank 0's host")
    for r in range(world):
        e = env[r]
        want = {"RANK": str(r), "WORLD_SIZE": str(world), "LOCAL_RANK": str(r % nproc),
                "LOCAL_WORLD_SIZE": str(nproc), "NODE_RANK": str(r // nproc),
                "NNODES": str(nodes)}
        for name, value in want.items():
            ctx.eq(e.get(name), value, f"per-node: rank {r} {name}")
        ctx.eq(host[r], hosts[r // nproc], f"per-node: host of rank {r}")
        ok = recs[r].get("probe.rendezvous", "").startswith("ok")
        ctx.check(ok, f"per-node: rank {r} rendezvous: {recs[r].get('probe.rendezvous')}")

out2 = ctx.outdir("contradiction")
p = ctx.run(["srun", "-N1", "--ntasks-per-node=2", ctx.dtlaunch, "--nproc-per-node", "2", "--"]
            + ctx.probe_argv(out2), timeout=30)
ctx.check(p.returncode == 2, f"contradiction: srun rc={p.returncode}, want 2")
ctx.check("would start 4 workers" in p.stderr, f"contradiction: stderr {p.stderr.strip()!r}")
ctx.eq(ctx.records(out2), {}, "contradiction: probes that ran")
ctx.finish()
