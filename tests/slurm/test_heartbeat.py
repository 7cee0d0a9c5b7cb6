#!/usr/bin/python3
"""The heartbeat under real Slurm with the C++ example (dtlaunch-train --synthetic, gloo), 3 nodes
x 2 ranks, DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3, srun --kill-on-bad-exit=1 as in the templates. Each
fault hits one node mid-training: its ranks killed (SIGKILL), frozen (SIGSTOP), cut off (eth0
down in its namespace, restored afterwards), or rank 0's node killed; plus one node's ranks
killed before the rendezvous. Every survivor must say "peer lost" naming the node and exit 76,
srun's step must end within the timeout + 5 s of the fault, and nothing of the job may be left
on any node."""
import os
import re
import signal
import subprocess
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
if not ctx.args.train:
    ctx.fail("--train is required")
    ctx.finish()
train = os.path.abspath(ctx.args.train)
TIMEOUT = 3
BOUND = TIMEOUT + 5
layout = ["-N3", "--ntasks-per-node=2", "--cpus-per-task=1", "--kill-on-bad-exit=1", "-l"]
ns_prefix = os.environ.get("SLURM_NETNS_NS_PREFIX", "")


def netns(k):
    return ns_prefix + ctx.node(k)


def train_pids(k):
    """The example's processes in node k's namespace (not slurmd's nor slurmstepd's)."""
    p = subprocess.run(["ip", "netns", "pids", netns(k)], capture_output=True, text=True)
    pids = []
    for pid in p.stdout.split():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip().startswith("dtlaunch-train"):
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def ip_link(k, state):
    return subprocess.run(["ip", "netns", "exec", netns(k), "ip", "link", "set", "eth0", state],
                          capture_output=True, text=True)


# name, victim node, fault, when ("training" or "start"), how the survivors must see it
CASES = [
    ("kill mid-training", 2, "kill", "training", "exited"),
    ("freeze", 2, "stop", "training", "frozen"),
    ("partition", 2, "link", "training", "unreachable"),
    ("rank 0's node killed", 1, "kill", "training", "exited"),
    ("kill before the rendezvous", 3, "kill", "start", None),
]
for i, (name, victim, fault, when, how) in enumerate(CASES):
    print(f"case {name}")
    out = os.path.join(ctx.outdir(f"hb{i}"), "srun.out")
    argv = ["timeout", "-k", "5", "120", "srun"] + layout + [
        ctx.dtlaunch, "--", train, "--synthetic", "200000", "--batch-size", "16",
        "--log-every", "1", "--rendezvous-timeout", "300"]
    env = dict(ctx.env)
    env["DTLAUNCH_DDP_HEARTBEAT_TIMEOUT"] = str(TIMEOUT)
    with open(out, "w") as sink:
        srun = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True)
    # Wait for the moment of the fault: a logged step, or the victim's processes started.
    deadline = time.monotonic() + 90
    ready = False
    while time.monotonic() < deadline and srun.poll() is None:
        if when == "start":
            ready = len(train_pids(victim)) == 2
        else:
            ready = " loss " in open(out).read()
        if ready:
            break
        time.sleep(0.05)
    if not ctx.check(ready, f"{name}: the job reached the moment of the fault"):
        srun.kill()
        srun.wait()
        print(open(out).read())
        continue
    pids = train_pids(victim)
    t0 = time.monotonic()
    if fault == "kill":
        for p in pids:
            os.kill(p, signal.SIGKILL)
    elif fault == "stop":
        for p in pids:
            os.kill(p, signal.SIGSTOP)
    else:
        r = ip_link(victim, "down")
        ctx.eq(r.returncode, 0, f"{name}: eth0 down ({r.stderr.strip()})")
    # The survivors end (and srun, which also ends the frozen tasks); the cut-off node's
    # own tasks cannot tell srun: the link comes back once the survivors are done.
    text = ""
    ended = None
    while time.monotonic() - t0 < BOUND + 30:
        if srun.poll() is not None:
            ended = time.monotonic() - t0
            break
        text = open(out).read()
        if fault == "link" and ended is None:
            survivors = [r for r in range(6) if r // 2 != victim - 1]
            if all(re.search(rf"^{r}: dtlaunch-train: peer-lost error", text, re.M)
                   for r in survivors):
                ended = time.monotonic() - t0
                ip_link(victim, "up")
        time.sleep(0.05)
    if fault == "link":
        ip_link(victim, "up")
    try:
        srun.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srun.kill()
        srun.wait()
    step_end = time.monotonic() - t0
    text = open(out).read()
    print(f"  srun rc={srun.returncode}; survivors done {ended if ended is not None else -1:.2f} s, "
          f"step ended {step_end:.2f} s after the fault")
    ctx.check(ended is not None and ended <= BOUND,
              f"{name}: the survivors ended within {BOUND} s of the fault ({ended})")
    if fault != "link":
        ctx.check(step_end <= BOUND, f"{name}: srun's step ended {step_end:.1f} s after the fault")
    node = ctx.node(victim)
    if how:
        for r in range(6):
            if r // 2 == victim - 1:
                continue
            line = re.search(rf"^{r}: dtlaunch-train: peer-lost error: .*", text, re.M)
            ok = line and f"({node})" in line.group(0) and how in line.group(0)
            ctx.check(ok, f"{name}: rank {r} says peer lost, naming {node}, {how}: "
                          f"{line.group(0) if line else 'no such line'}")
        # Every survivor's own status (srun: "node1: tasks 0-1: Exited with exit code 76").
        codes = re.findall(r"srun: error: (\S+): tasks? ([\d\-,]+): Exited with exit code (\d+)",
                           text)
        ctx.check(any(c == "76" for _, _, c in codes), f"{name}: a survivor exited 76: {codes}")
        if fault == "kill" and victim == 1:
            ctx.check("which hosted the store" in text, f"{name}: rank 0 named as the store's host")
    for k in range(1, ctx.nodes + 1):
        left = train_pids(k)
        ctx.eq(left, [], f"{name}: processes of the job left on {ctx.node(k)}")
    if ctx.failures:
        print(text[-4000:])
ctx.finish()
