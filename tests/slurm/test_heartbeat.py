#!/usr/bin/python3
"""The heartbeat under real Slurm with the C++ example (dtlaunch-train --synthetic, gloo), 4 nodes
x 1 rank, DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=3, srun --kill-on-bad-exit=1 as in the templates. Each
fault hits one node mid-training: its rank killed (SIGKILL), frozen (SIGSTOP), cut off (eth0
down in its namespace, restored afterwards), or rank 0's node killed; plus one node's rank
killed before the rendezvous. Every survivor must say "peer lost" naming the node and exit 76,
srun's step must end within the timeout + 5 s of the fault, and nothing of the job may be left
on any node."""
import os
import re
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
NODES = 4
layout = [f"-N{NODES}", "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=1", "-l"]
# A job key, as the templates export one (docs/security.md): the heartbeat's frames are sealed
# across the nodes.
env = dict(ctx.env, DTLAUNCH_DDP_HEARTBEAT_TIMEOUT=str(TIMEOUT),
           DTLAUNCH_JOB_KEY=os.urandom(32).hex())


def train_pids(k):
    """The example's processes in node k's namespace (not slurmd's nor slurmstepd's)."""
    return ctx.pids_in_node(k, ("dtlaunch-train",))


def peer_lost_line(rank, text):
    return re.search(rf"^{rank}: dtlaunch-train: peer-lost error: .*", text, re.M)


# name, victim node, fault, when ("training" or "start"), how the survivors must see it
CASES = [
    ("kill mid-training", 2, "kill", "training", "exited"),
    ("freeze", 2, "stop", "training", "frozen"),
    ("partition", 3, "link", "training", "unreachable"),
    ("rank 0's node killed", 1, "kill", "training", "exited"),
    ("kill before the rendezvous", 4, "kill", "start", None),
]
for name, victim, fault, when, how in CASES:
    print(f"case {name}")
    argv = ["srun"] + layout + [
        ctx.dtlaunch, "--", train, "--synthetic", "200000", "--batch-size", "16",
        "--log-every", "1", "--rendezvous-timeout", "300"]
    survivors = [r for r in range(NODES) if r != victim - 1]  # one rank per node
    if when == "start":
        ready = lambda text, victim=victim: len(train_pids(victim)) == 1
    else:
        ready = lambda text: " loss " in text
    result = ctx.fault_case(
        name, argv, env, ready, victim, fault, lambda victim=victim: train_pids(victim),
        lambda text, survivors=survivors: all(peer_lost_line(r, text) for r in survivors), BOUND)
    if result is None:
        continue
    text = result
    node = ctx.node(victim)
    if how:
        for r in survivors:
            line = peer_lost_line(r, text)
            ok = line and f"({node})" in line.group(0) and how in line.group(0)
            ctx.check(ok, f"{name}: rank {r} says peer lost, naming {node}, {how}: "
                          f"{line.group(0) if line else 'no such line'}")
        # Every survivor's own status (srun: "node1: task 0: Exited with exit code 76").
        codes = re.findall(r"srun: error: (\S+): tasks? ([\d\-,]+): Exited with exit code (\d+)",
                           text)
        ctx.check(any(c == "76" for _, _, c in codes), f"{name}: a survivor exited 76: {codes}")
        if fault == "kill" and victim == 1:
            ctx.check("which hosted the store" in text, f"{name}: rank 0 named as the store's host")
    for k in range(1, NODES + 1):
        ctx.eq(train_pids(k), [], f"{name}: processes of the job left on {ctx.node(k)}")
    if ctx.failures:
        print(text[-4000:])
# A forger on node 4, outside the job (3 nodes), sends issue 35's verdict frame, another job's
# sealed frames and a trickled frame to every port the ranks listen on (docs/security.md): the
# job must go on healthy.
print("case forger from another node")
marker = f"DTLAUNCH_FORGER_TEST={os.getpid()}"
job_env = dict(env, DTLAUNCH_FORGER_TEST=str(os.getpid()))
argv = ["srun", "-N3", "--ntasks-per-node=1", "--cpus-per-task=1", "--kill-on-bad-exit=1", "-l",
        ctx.dtlaunch, "--", train, "--synthetic", "200000", "--batch-size", "16", "--log-every",
        "1", "--rendezvous-timeout", "300"]
with open(os.path.join(ctx.outdir("heartbeat"), "forger.log"), "w+") as sink:
    srun = subprocess.Popen(["timeout", "-k", "5", "120"] + argv, env=job_env, stdout=sink,
                            stderr=subprocess.STDOUT)
    forger = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp", "forger.py")
    f = subprocess.run(["ip", "netns", "exec", ctx.netns(4), "/usr/bin/python3", forger, marker,
                        "3"], capture_output=True, text=True, timeout=90)
    print(f.stdout + f.stderr)
    ctx.eq(f.returncode, 0, "forger from node 4 ran")
    alive = [len(train_pids(k)) for k in (1, 2, 3)]
    srun.terminate()  # timeout passes the TERM to srun, which ends the step
    srun.wait(timeout=60)
    for _ in range(200):
        if not any(train_pids(k) for k in (1, 2, 3)):
            break
        time.sleep(0.1)
    sink.seek(0)
    text = sink.read()
ctx.eq(alive, [1, 1, 1], "forger from another node: every rank still training after it")
ctx.check("peer lost" not in text and "peer-lost" not in text,
          "forger from another node: no forged frame acted on")
for k in range(1, NODES + 1):
    ctx.eq(train_pids(k), [], f"forger: processes of the job left on {ctx.node(k)}")
if ctx.failures:
    print(text[-4000:])
ctx.finish()
