#!/usr/bin/python3
"""`dtlaunch --watch` under real Slurm with an unmodified PyTorch gloo training loop
(torch_train_loop.py, /usr/bin/python3), 4 nodes x 1 task, --watch-timeout 3, srun
--kill-on-bad-exit=1 as in the templates. Each fault hits one node mid-training: every process
of the job there killed (SIGKILL) or frozen (SIGSTOP), its link cut (eth0 down in its namespace,
restored afterwards), or rank 0's node killed. Every survivor's dtlaunch must print one line
naming the node and exit 76 within the timeout + 5 s; srun's step must end; nothing of the job
may be left on any node. A clean run first: the program's status passes through (0)."""
import os
import re

import slurmtest

ctx = slurmtest.Ctx(__doc__)
TIMEOUT = 3
BOUND = TIMEOUT + 5
NODES = 4
layout = [f"-N{NODES}", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "-l"]
script = os.path.join(ctx.repo, "tests", "slurm", "torch_train_loop.py")


def job_pids(k):
    """The job's processes on node k: dtlaunch and the program."""
    return ctx.pids_in_node(k, ("dtlaunch", "python3"))


def srun_argv(steps):
    return ["srun"] + layout + [
        ctx.dtlaunch, "--watch", "--watch-timeout", str(TIMEOUT), "--grace", "2", "--",
        "/usr/bin/python3", script, str(steps)]


# A clean run: the program's status (0) passes through, nobody is declared lost.
p = ctx.run(srun_argv(30), timeout=120)
text = p.stdout + p.stderr
ctx.eq(p.returncode, 0, f"clean run: srun's status\n{text[-2000:]}")
ctx.check("peer was lost" not in text, "clean run: no loss declared")

# name, victim node, fault, how the survivors must see it
CASES = [
    ("kill", 4, "kill", "exited"),
    ("freeze", 3, "stop", "frozen"),
    ("partition", 2, "link", "unreachable"),
    ("rank 0's node killed", 1, "kill", "exited"),
]


def footprint():
    """The footprint of --watch, on every node: one process (dtlaunch), two threads (its main
    thread waiting on the program, the heartbeat's), under 5 MB of RSS."""
    for k in range(1, NODES + 1):
        for pid in job_pids(k):
            try:
                with open(f"/proc/{pid}/status") as f:
                    status = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            if status["Name"].strip() != "dtlaunch":
                continue
            rss_kb = int(status["VmRSS"].split()[0])
            threads = int(status["Threads"])
            print(f"  footprint {ctx.node(k)}: dtlaunch --watch VmRSS {rss_kb} kB "
                  f"(anon {status['RssAnon'].split()[0]}, file {status['RssFile'].split()[0]})"
                  f", {threads} threads")
            ctx.check(rss_kb < 5 * 1024 and threads <= 2,
                      f"{ctx.node(k)}: dtlaunch --watch {rss_kb} kB, {threads} threads")


def watch_lines(rank, text):
    return re.findall(rf"^{rank}: dtlaunch --watch: .*", text, re.M)


for i, (name, victim, fault, how) in enumerate(CASES):
    print(f"case {name}")
    survivors = [k - 1 for k in range(1, NODES + 1) if k != victim]  # one task per node: rank
    measured = []

    def ready(text, first=(i == 0)):
        if re.search(r"^\d+: step 20$", text, re.M) is None:
            return False
        if first and not measured:
            footprint()
            measured.append(True)
        return True

    def survivors_done(text, survivors=survivors):
        return all(re.search(rf"^{r}: dtlaunch --watch: .*exit 76", text, re.M)
                   for r in survivors)

    def victim_pids(victim=victim):
        pids = job_pids(victim)
        ctx.check(len(pids) >= 2, f"{name}: dtlaunch and python3 found on the victim: {pids}")
        return pids

    result = ctx.fault_case(name, srun_argv(100000), ctx.env, ready, victim, fault, victim_pids,
                            survivors_done, BOUND)
    if result is None:
        continue
    text = result
    node = ctx.node(victim)
    for r in survivors:
        lines = watch_lines(r, text)
        ok = len(lines) == 1 and f"({node})" in lines[0] and how in lines[0]
        ctx.check(ok, f"{name}: rank {r} printed one line naming {node}, {how}: {lines}")
    codes = re.findall(r"srun: error: (\S+): tasks? ([\d\-,]+): Exited with exit code (\d+)", text)
    # srun --kill-on-bad-exit ends the step at the first 76: a survivor that printed its line may
    # be killed by that before srun counts its own 76 (seen in the partition case).
    exited_76 = [r for r in survivors
                 if any(c == "76" and str(r) in t.split(",") for _, t, c in codes)]
    ctx.check(exited_76, f"{name}: a survivor exited 76: {codes}")
    for k in range(1, NODES + 1):
        ctx.eq(job_pids(k), [], f"{name}: processes of the job left on {ctx.node(k)}")
    if ctx.failures:
        print(text[-4000:])
ctx.finish()
