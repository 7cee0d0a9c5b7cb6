#!/usr/bin/python3
"""dtlaunch job (restarts inside the allocation) in the real cluster, through the resilient.sbatch
template: 3 nodes, 2 used + 1 spare (the fixture's cluster has 3 nodes), 1 rank per node.
- kill (SIGKILL), freeze (SIGSTOP), partition (eth0 down on node 2 until the job moved on) of
  node 2's ranks mid-training, the example being dtlaunch-train --synthetic (gloo, heartbeat 3 s,
  --checkpoint-every 20): the job must name node 2 the culprit, restart on nodes 1 and 3, resume
  from the checkpoint and complete; nothing of the job may be left on node 2. For the kill, the
  time from the fault to each phase of the recovery is printed (docs/benchmarks.md).
- a node whose /etc/hosts maps its name to 127.0.1.1 fails the preflight and is excluded before
  the program starts;
- exit 75 passes through, not retried; bad input (exit 2) is not retried;
- the budget is global: a program that fails on whichever node is first, with --max-restarts 1,
  stops after 2 attempts though a spare would be left."""
import json
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
layout = ["--nodes=3", "--ntasks-per-node=1", "--gpus-per-node=1", "--cpus-per-task=1"]
ns_prefix = os.environ.get("SLURM_NETNS_NS_PREFIX", "")


def pids_of(k, prefix):
    p = subprocess.run(["ip", "netns", "pids", ns_prefix + ctx.node(k)], capture_output=True,
                       text=True)
    pids = []
    for pid in p.stdout.split():
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip().startswith(prefix):
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def hosts(expr):
    return subprocess.run([ctx.dtlaunch, "hostnames", expr], capture_output=True,
                          text=True).stdout.split()


def in_node_mount(k, argv):
    """Runs argv in node k's slurmd's mount and network namespaces."""
    base = ctx.env.get("SLURM_NETNS_DIR", "/tmp/slurm-netns")
    pid = open(os.path.join(base, "nodes", ctx.node(k), "slurmd.pid")).read().strip()
    return subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", f"--net=/proc/{pid}/ns/net",
                           "--"] + argv, capture_output=True, text=True, timeout=10)


def base_env(**more):
    env = {"DTLAUNCH": ctx.dtlaunch, "TRAIN": train, "SPARE_NODES": "1",
           "DTLAUNCH_DDP_HEARTBEAT_TIMEOUT": "3"}
    env.update(more)
    return env


# ---- kill mid-training --------------------------------------------------------------------
print("case kill mid-training")
ckpt = os.path.join(ctx.outdir("kill"), "train.ckpt")
steps = 300
fault = {}


def kill_when_training(job):
    """Kills node 2's ranks once step 60 is logged, then follows the job's output files to time
    each phase of the recovery (the files grow as the lines come)."""
    deadline = time.monotonic() + 120
    info = {}
    while time.monotonic() < deadline:
        info = ctx.scontrol_job(job)
        out = info.get("StdOut", "")
        if out and os.path.exists(out) and re.search(r"step 6\d/", open(out).read()):
            pids = pids_of(2, "dtlaunch-train")
            if pids:
                for p in pids:
                    os.kill(p, signal.SIGKILL)
                fault["t"] = time.monotonic()
                break
        time.sleep(0.05)
    else:
        ctx.fail("kill: no training step 60-69 logged within 120 s")
        return
    marks = {"srun reports a failure": (info["StdErr"], r"srun: error: \S+: task"),
             "attempt 1 decided": (info["StdErr"], r"attempt 1 on \S+: failed"),
             "attempt 2 started": (info["StdErr"], r"attempt 2 on \S+ \(restart 1\)"),
             "resumed from the checkpoint": (info["StdOut"], r"resumed from "),
             "first resumed step logged": (info["StdOut"], r"resumed from [^\n]*\n(.*\n)*.*step \d+/")}
    seen = {}
    while time.monotonic() - fault["t"] < 150 and len(seen) < len(marks):
        for name, (path, pattern) in marks.items():
            if name not in seen and os.path.exists(path) and re.search(pattern, open(path).read()):
                seen[name] = time.monotonic() - fault["t"]
        time.sleep(0.05)
    fault["phases"] = seen


env = base_env(TRAIN_ARGS=f"--synthetic {steps * 8} --batch-size 8 --epochs 1 --log-every 1 "
                          f"--checkpoint {ckpt} --resume --checkpoint-every 20")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 240,
                                        before_wait=kill_when_training)
ctx.eq(info.get("JobState"), "COMPLETED", "kill: the job completed")
node2 = ctx.node(2)
first = re.search(r"dtlaunch job: attempt 1 on \S+: failed .*", err)
ctx.check(first and f"culprit {node2}" in first.group(0),
          f"kill: attempt 1 names {node2} the culprit: {first.group(0) if first else err}")
second = re.search(r"dtlaunch job: attempt 2 on (\S+): completed", err)
ctx.check(second and hosts(second.group(1)) == [ctx.node(1), ctx.node(3)],
          f"kill: attempt 2 ran on the others plus the spare: {second.group(0) if second else err}")
ctx.check(re.search(r"resumed from .* at epoch 1 step [1-9]\d* ", text) is not None,
          "kill: the restart resumed from a mid-epoch checkpoint")
ctx.check(f"done: {steps} steps" in text, f"kill: all {steps} steps done")
ctx.check(not pids_of(2, "dtlaunch"), f"kill: nothing of the job left on {node2}")
for name, at in sorted(fault.get("phases", {}).items(), key=lambda kv: kv[1]):
    print(f"  {at:6.2f} s after the fault: {name}")
ctx.check(len(fault.get("phases", {})) == 5, f"kill: every phase seen: {fault.get('phases')}")
if ctx.failures:
    print(text, err)

# ---- a frozen node, a partitioned node ---------------------------------------------------------
def ip_link(k, state):
    return subprocess.run(["ip", "netns", "exec", ns_prefix + ctx.node(k), "ip", "link", "set",
                           "eth0", state], capture_output=True, text=True)


for name, fault_kind in (("freeze", "stop"), ("partition", "link")):
    print(f"case {name}")
    ckpt = os.path.join(ctx.outdir(name), "train.ckpt")
    state = {}

    def fault_when_training(job, fault_kind=fault_kind, state=state):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = ctx.scontrol_job(job)
            out = info.get("StdOut", "")
            if out and os.path.exists(out) and re.search(r"step 6\d/", open(out).read()):
                pids = pids_of(2, "dtlaunch")
                if pids:
                    break
            time.sleep(0.05)
        else:
            ctx.fail(f"{name}: no training step 60-69 logged within 120 s")
            return
        if fault_kind == "stop":
            for p in pids:
                os.kill(p, signal.SIGSTOP)
        else:
            ctx.eq(ip_link(2, "down").returncode, 0, f"{name}: eth0 down on node2")
        t0 = time.monotonic()
        # The link comes back once the job has moved on (a real partition heals or the node is
        # drained); the stopped processes are killed by Slurm's end of their step.
        while time.monotonic() - t0 < 120:
            if re.search(r"attempt 2 on \S+ \(restart 1\)", open(info["StdErr"]).read()):
                state["moved_on"] = time.monotonic() - t0
                break
            time.sleep(0.05)
        if fault_kind == "link":
            ip_link(2, "up")

    env = base_env(TRAIN_ARGS=f"--synthetic {steps * 8} --batch-size 8 --epochs 1 --log-every 1 "
                              f"--checkpoint {ckpt} --resume --checkpoint-every 20",
                   JOB_ARGS="--stop-grace 5")
    job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 240,
                                            before_wait=fault_when_training)
    ctx.eq(info.get("JobState"), "COMPLETED", f"{name}: the job completed")
    first = re.search(r"dtlaunch job: attempt 1 on \S+: failed .*", err)
    ctx.check(first and f"culprit {node2}" in first.group(0),
              f"{name}: attempt 1 names {node2} the culprit: {first.group(0) if first else err}")
    ctx.check(f"done: {steps} steps" in text, f"{name}: all {steps} steps done")
    print(f"  moved on to attempt 2 {state.get('moved_on', -1):.2f} s after the fault")
    time.sleep(1)
    ctx.check(not pids_of(2, "dtlaunch"), f"{name}: nothing of the job left on {node2}")
    if ctx.failures:
        print(text, err)

# ---- a node that fails the preflight ------------------------------------------------------
print("case preflight")
base = ctx.env.get("SLURM_NETNS_DIR", "/tmp/slurm-netns")
hosts_file = os.path.join(ctx.outdir("preflight"), "hosts-loopback")
with open(os.path.join(base, "etc", "hosts")) as f:
    lines = [l for l in f if ctx.node(2) not in l.split()[1:]]
with open(hosts_file, "w") as f:
    f.write(f"127.0.1.1 {ctx.node(2)}\n" + "".join(lines))
r = in_node_mount(2, ["mount", "--bind", hosts_file, "/etc/hosts"])
if ctx.eq(r.returncode, 0, f"preflight: private /etc/hosts on node2 ({r.stderr.strip()})"):
    try:
        env = base_env(TRAIN_ARGS="--synthetic 160 --batch-size 8 --epochs 1 --log-every 10")
        job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 120)
    finally:
        in_node_mount(2, ["umount", "/etc/hosts"])
    ctx.eq(info.get("JobState"), "COMPLETED", "preflight: the job completed")
    first = re.search(r"dtlaunch job: attempt 1 on \S+: failed .*", err)
    ctx.check(first and f"culprit {node2}" in first.group(0) and "preflight" in first.group(0),
              f"preflight: attempt 1 names {node2}, failing the preflight: "
              f"{first.group(0) if first else err}")
    ctx.check(text.count("dtlaunch-train: 2 rank(s)") == 1,
              "preflight: the program started once, after the exclusion")
    ctx.check("done: 20 steps" in text, "preflight: training done on the others plus the spare")
    if ctx.failures:
        print(text, err)

# ---- exit 75 passes through ---------------------------------------------------------------
print("case exit 75")
script = os.path.join(ctx.outdir("e75"), "exit75.sh")
with open(script, "w") as f:
    f.write("#!/bin/sh\nexit 75\n")
os.chmod(script, 0o755)
env = base_env(TRAIN=script, TRAIN_ARGS="")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 90)
ctx.eq(info.get("ExitCode"), "75:0", "exit 75: the job's exit code")
ctx.eq(len(re.findall(r"dtlaunch job: attempt \d+ on \S+: ", err)), 1, "exit 75: one attempt")
ctx.check("preempted" in err, f"exit 75: said preempted: {err}")

# ---- bad input is not retried ---------------------------------------------------------------
print("case bad input")
env = base_env(TRAIN_ARGS="--synthetic 64 --epochs 0")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 90)
ctx.eq(info.get("ExitCode"), "2:0", "bad input: the job's exit code")
ctx.check("not retried: bad input" in err, f"bad input: not retried: {err}")
ctx.check("attempt 2" not in err, "bad input: no second attempt")

# ---- the budget is global -------------------------------------------------------------------
print("case budget")
script = os.path.join(ctx.outdir("budget"), "first_fails.sh")
with open(script, "w") as f:
    f.write("#!/bin/sh\necho \"$(hostname) restart $DTLAUNCH_RESTART_COUNT "
            "torchelastic $TORCHELASTIC_RESTART_COUNT\"\n"
            "[ \"$SLURM_NODEID\" = 0 ] && exit 1\nsleep 20\n")
os.chmod(script, 0o755)
env = base_env(TRAIN=script, TRAIN_ARGS="", MAX_RESTARTS="1", JOB_ARGS="--format json")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env, 120)
ctx.eq(info.get("ExitCode"), "1:0", "budget: the job's exit code")
ctx.check("restart budget (--max-restarts 1) is spent" in err, f"budget: said spent: {err}")
summary = [l for l in text.splitlines() if l.startswith('{"result"')]
ok = False
if summary:
    s = json.loads(summary[-1])
    ok = [a["culprits"] for a in s["attempts"]] == [[ctx.node(1)], [ctx.node(2)]]
ctx.check(ok, f"budget: the JSON summary names node 1 then node 2: {summary}")
for restart, node in ((0, 1), (1, 2)):
    want = f"{ctx.node(node)} restart {restart} torchelastic {restart}"
    ctx.check(want in text, f"budget: the program saw {want!r}")
if ctx.failures:
    print(text, err)
ctx.finish()
