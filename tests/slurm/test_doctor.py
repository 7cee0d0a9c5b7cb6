#!/usr/bin/python3
"""Scenario: `dtlaunch doctor` and --preflight under real Slurm, healthy and with faults injected
in one node's own namespaces: a task that never runs dtlaunch, a node that cannot route to rank
0's node, rank 0's node resolving its own name to 127.0.1.1 (a private /etc/hosts in that node's
mount namespace), another file at the program's path on one node (a bind mount there), and
--preflight passing (unmodified PyTorch then serves the same port) or failing (nothing starts),
a stray NCCL_SOCKET_IFNAME and another copy of a library on one node's tasks, the exclude list
fed back to srun --exclude, and the network test: a throttled link on one node (tc tbf in its
namespace) and ten healthy runs in a row without a false alarm."""
import json
import os
import shutil
import subprocess
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
# Nodes 1-3 by name: the cluster has 4, and the cases name node2 and node3 (Slurm chose node1,
# node3 and node4 for the slow-link case once, which then had no throttled node to find).
layout = ["-N3", "-n6", "--ntasks-per-node=2", "-w", ",".join(ctx.node(k) for k in (1, 2, 3))]
base = ctx.env.get("SLURM_NETNS_DIR", "/tmp/slurm-netns")
ns_prefix = ctx.env.get("SLURM_NETNS_NS_PREFIX", "")


def doctor(extra_srun=(), extra=(), program=("/bin/true",), wrapper=None, timeout=60):
    argv = [ctx.dtlaunch, "doctor", "--format", "json"] + list(extra) + ["--"] + list(program)
    if wrapper:
        argv = ["/bin/sh", "-c", wrapper + ' "$@"', "sh"] + argv
    p = ctx.run(["srun"] + layout + list(extra_srun) + argv, timeout=timeout)
    try:
        report = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        report = None
    return p, report


def problems(report, kind):
    return [q for q in (report or {}).get("problems", []) if q["kind"] == kind]


def in_node(k, argv, mount=False):
    """Runs argv inside node k's network namespace, or its slurmd's mount namespace too."""
    name = ctx.node(k)
    if mount:
        pid = open(os.path.join(base, "nodes", name, "slurmd.pid")).read().strip()
        cmd = ["nsenter", f"--mount=/proc/{pid}/ns/mnt", f"--net=/proc/{pid}/ns/net", "--"] + argv
    else:
        cmd = ["nsenter", f"--net=/run/netns/{ns_prefix}{name}", "--"] + argv
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10)


# 1. Healthy: exit 0, 6 ranks on 3 hosts, and little more than srun's own start.
print("case healthy")
t0 = time.monotonic()
plain = ctx.run(["srun"] + layout + ["/bin/true"])
srun_alone = time.monotonic() - t0
# The next srun waits in the queue while that job is still completing (a loaded machine): wait
# for an empty queue first, so that the comparison is of the two starts alone.
for _ in range(50):
    if ctx.run(["squeue", "-h", "-o", "%i"], timeout=10).stdout.strip() == "":
        break
    time.sleep(0.1)
p, report = doctor()
print(f"  srun alone {srun_alone:.2f} s, with doctor {p.elapsed:.2f} s")
if not ctx.eq(p.returncode, 0, "healthy: exit status"):
    ctx.show(p)
if report:
    ctx.eq(report["ok"], True, "healthy: ok")
    ctx.eq(sorted(r["rank"] for r in report["ranks"]), list(range(6)), "healthy: ranks")
    ctx.eq(sorted({r["host"] for r in report["ranks"]}), [ctx.node(k) for k in (1, 2, 3)],
           "healthy: hosts")
    ctx.eq(report["problems"], [], "healthy: problems")
    ctx.check(all(r["local_addr"] == ctx.node_addr(int(r["host"][len(ctx.prefix):]))
                  for r in report["ranks"] if r["rank"] != 0), "healthy: each task's from-address")
ctx.check(p.elapsed - srun_alone < 1.0,
          f"healthy: doctor took {p.elapsed:.2f} s against {srun_alone:.2f} s for srun alone")
ctx.check(p.stderr.strip() == "", f"healthy: stderr {p.stderr.strip()!r}")

# 2. A task that never runs dtlaunch: missing-rank names it and its host, within the timeout.
print("case missing rank")
p, report = doctor(extra=["--timeout", "3"],
                   wrapper='[ "$SLURM_PROCID" = 3 ] && exit 0; exec "$@"')
ctx.eq(p.returncode, 3, "missing rank: exit status")
ctx.check(p.elapsed < 15, f"missing rank: took {p.elapsed:.1f} s")
missing = problems(report, "missing-rank")
if ctx.eq([(q["ranks"], q["hosts"]) for q in missing], [([3], [ctx.node(2)])],
          "missing rank: missing-rank problems"):
    ctx.check("should run on %s as local rank 1" % ctx.node(2) in missing[0]["message"],
              f"missing rank: message {missing[0]['message']!r}")
else:
    ctx.show(p)

# 3. node3 cannot route to rank 0's node: unreachable names node3, its tasks say why.
print("case unreachable")
rank0_addr = ctx.node_addr(1)
r = in_node(3, ["ip", "route", "add", "prohibit", f"{rank0_addr}/32"])
if ctx.eq(r.returncode, 0, f"unreachable: route in node3's namespace ({r.stderr.strip()})"):
    try:
        p, report = doctor(extra=["--timeout", "3"])
    finally:
        in_node(3, ["ip", "route", "del", "prohibit", f"{rank0_addr}/32"])
    ctx.eq(p.returncode, 3, "unreachable: exit status")
    ctx.eq([q["hosts"] for q in problems(report, "unreachable")], [[ctx.node(3)]],
           "unreachable: unreachable problems")
    ctx.check(f"cannot reach rank 0 at {ctx.node(1)}:" in p.stderr,
              f"unreachable: node3's tasks say why on stderr: {p.stderr.strip()!r}")

# 4. Rank 0's node resolves its own name to 127.0.1.1 (Debian's default /etc/hosts).
print("case host resolves to loopback")
hosts_file = os.path.join(ctx.work, "hosts-loopback")
with open(os.path.join(base, "etc", "hosts")) as f:
    lines = [l for l in f if ctx.node(1) not in l.split()[1:]]
with open(hosts_file, "w") as f:
    f.write(f"127.0.1.1 {ctx.node(1)}\n" + "".join(lines))
r = in_node(1, ["mount", "--bind", hosts_file, "/etc/hosts"], mount=True)
if ctx.eq(r.returncode, 0, f"loopback: private /etc/hosts on node1 ({r.stderr.strip()})"):
    try:
        p, report = doctor(extra=["--timeout", "5"])
    finally:
        in_node(1, ["umount", "/etc/hosts"], mount=True)
    loop = problems(report, "host-resolves-to-loopback")
    ctx.eq(p.returncode, 3, "loopback: exit status")
    ctx.check(loop and all(q["hosts"] == [ctx.node(1)] for q in loop),
              f"loopback: problems {loop}")

# 5. Another file at the program's path on node2.
print("case program differs")
program = os.path.join(ctx.work, "train-program")
other = os.path.join(ctx.work, "other-program")
shutil.copy(ctx.probe, program)
shutil.copy("/bin/true", other)
r = in_node(2, ["mount", "--bind", other, program], mount=True)
if ctx.eq(r.returncode, 0, f"program differs: bind mount on node2 ({r.stderr.strip()})"):
    try:
        p, report = doctor(extra=["--timeout", "5"], program=[program])
    finally:
        in_node(2, ["umount", program], mount=True)
    ctx.eq(p.returncode, 3, "program differs: exit status")
    ctx.eq([q["hosts"] for q in problems(report, "program-differs")], [[ctx.node(2)]],
           "program differs: program-differs problems")

# 6. --preflight passing: unmodified PyTorch then binds and serves the same port.
print("case preflight passes")
client = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_allreduce.py")
out = ctx.outdir("preflight-torch")
p = ctx.run(["srun"] + layout + ["--kill-on-bad-exit=1", ctx.dtlaunch, "--preflight", "--",
                                 "/usr/bin/python3", client, out], timeout=100)
if not ctx.eq(p.returncode, 0, "preflight passes: srun exit status"):
    ctx.show(p)
results = [json.load(open(os.path.join(out, f))) for f in os.listdir(out) if f.endswith(".json")]
ctx.eq(sorted(r["rank"] for r in results), list(range(6)), "preflight passes: ranks all-reduced")
ctx.check(all(r["sum"] == r["want"] for r in results), "preflight passes: sums")

# 7. --preflight failing: exit 3, and the program never starts on any rank.
print("case preflight fails")
out = ctx.outdir("preflight-fail")
p = ctx.run(["srun"] + layout + ["/bin/sh", "-c",
                                 '[ "$SLURM_PROCID" = 5 ] && exit 0; exec "$@"', "sh",
                                 ctx.dtlaunch, "--preflight", "--preflight-timeout", "3", "--"]
            + ctx.probe_argv(out), timeout=60)
ctx.eq(p.returncode, 3, "preflight fails: srun exit status")
ctx.eq(sorted(ctx.records(out)), [], "preflight fails: ranks that started the program")
ctx.check("missing-rank" in p.stderr, f"preflight fails: report on stderr: {p.stderr[-300:]!r}")
# 8. A stray NCCL_SOCKET_IFNAME on node2's tasks only: env-differs names it, the exclude list is
# node2, and the same job with that list fed back to srun --exclude is clean.
print("case env differs, exclude fed back")
stray = f'[ "$SLURMD_NODENAME" = {ctx.node(2)} ] && export NCCL_SOCKET_IFNAME=eth9; exec "$@"'
p, report = doctor(extra=["--timeout", "10"], wrapper=stray)
ctx.eq(p.returncode, 3, "env differs: exit status")
found = problems(report, "env-differs")
if ctx.eq([(q["hosts"], q["ranks"]) for q in found], [([ctx.node(2)], [2, 3])],
          "env differs: env-differs problems"):
    ctx.check(found[0]["message"].startswith("NCCL_SOCKET_IFNAME is 'eth9' on " + ctx.node(2)),
              f"env differs: message {found[0]['message']!r}")
else:
    ctx.show(p)
exclude = (report or {}).get("exclude")
ctx.eq(exclude, ctx.node(2), "env differs: exclude list")
if exclude:
    argv = ["srun", "-N2", "-n4", "--ntasks-per-node=2", f"--exclude={exclude}", "/bin/sh", "-c",
            stray + ' "$@"', "sh", ctx.dtlaunch, "doctor", "--format", "json", "--timeout", "10",
            "--", "/bin/true"]
    p = ctx.run(argv)
    ctx.eq(p.returncode, 0, "exclude fed back: exit status")
    try:
        again = json.loads(p.stdout)
    except json.JSONDecodeError:
        again = {}
    ctx.eq(again.get("problems"), [], "exclude fed back: problems")
    fed_back = {r["host"] for r in again.get("ranks", [])}
    ctx.check(len(fed_back) == 2 and ctx.node(2) not in fed_back,
              f"exclude fed back: 2 hosts, {ctx.node(2)} not among them: {sorted(fed_back)}")

# 9. Another copy of a library on node3 (through LD_LIBRARY_PATH there): libraries-differ names
# the library and the node.
print("case libraries differ")
libdir = os.path.join(ctx.work, "otherlib")
os.makedirs(libdir, exist_ok=True)
listing = subprocess.run(["ldd", ctx.probe], capture_output=True, text=True).stdout
gcc_s = next((l.split("=>")[1].split("(")[0].strip() for l in listing.splitlines()
              if "libgcc_s.so" in l and "=>" in l), "")
if ctx.check(gcc_s != "", f"libraries differ: the probe loads libgcc_s ({listing!r})"):
    name = os.path.basename(gcc_s)
    shutil.copy(gcc_s, os.path.join(libdir, name))
    with open(os.path.join(libdir, name), "ab") as f:
        f.write(b"\0" * 16)  # another build: the loader ignores bytes past the last segment
    other = f'[ "$SLURMD_NODENAME" = {ctx.node(3)} ] && export LD_LIBRARY_PATH={libdir}; exec "$@"'
    p, report = doctor(extra=["--timeout", "10"], wrapper=other, program=[ctx.probe, "--help"])
    ctx.eq(p.returncode, 3, "libraries differ: exit status")
    found = problems(report, "libraries-differ")
    if ctx.eq([q["hosts"] for q in found], [[ctx.node(3)]], "libraries differ: hosts"):
        ctx.check(found[0]["message"].startswith(f"{name} differs on {ctx.node(3)}: {libdir}/"),
                  f"libraries differ: message {found[0]['message']!r}")
    else:
        ctx.show(p)
    ctx.eq((report or {}).get("exclude"), ctx.node(3), "libraries differ: exclude list")

# 10. The network test: node2's link throttled to 8 Mbit/s inside its namespace. slow-network
# names node2 and only node2, and the exclude list is exactly node2.
print("case slow link")
throttle = ["tc", "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", "8mbit", "burst", "32kbit",
            "latency", "100ms"]
r = in_node(2, throttle)
if ctx.eq(r.returncode, 0, f"slow link: tc in node2's namespace ({r.stderr.strip()})"):
    try:
        p, report = doctor(extra=["--network", "--timeout", "10"], timeout=40)
    finally:
        r = in_node(2, ["tc", "qdisc", "del", "dev", "eth0", "root"])
        ctx.eq(r.returncode, 0, f"slow link: throttle removed ({r.stderr.strip()})")
    slow = problems(report, "slow-network")
    if ctx.eq([q["hosts"] for q in slow], [[ctx.node(2)]], "slow link: names node2 and only it"):
        print("  " + slow[0]["message"])
    else:
        print(f"  network: {json.dumps((report or {}).get('network'))[:600]}")
    ctx.eq(p.returncode, 3, "slow link: exit status")
    ctx.eq((report or {}).get("exclude"), ctx.node(2), "slow link: exclude list")
    ctx.check(p.elapsed < 15, f"slow link: took {p.elapsed:.1f} s")

# 11. No false alarm: ten healthy runs in a row on this (shared, loaded) machine.
print("case network healthy x10")
times = []
for run in range(10):
    p, report = doctor(extra=["--network", "--timeout", "10"], timeout=40)
    times.append(p.elapsed)
    if not ctx.eq((p.returncode, problems(report, "slow-network")), (0, []),
                  f"network healthy, run {run + 1}: exit status and slow-network"):
        ctx.show(p)
        break
print("  " + ", ".join(f"{t:.1f}" for t in times) + " s")
ctx.finish()
