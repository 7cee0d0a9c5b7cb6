#!/usr/bin/python3
"""`dtlaunch --watch` under real Slurm with an unmodified PyTorch gloo training loop
(torch_train_loop.py, /usr/bin/python3), 3 nodes x 1 task, --watch-timeout 3, srun
--kill-on-bad-exit=1 as in the templates. Each fault hits one node mid-training: every process
of the job there killed (SIGKILL) or frozen (SIGSTOP), its link cut (eth0 down in its namespace,
restored afterwards), or rank 0's node killed. Every survivor's dtlaunch must print one line
naming the node and exit 76 within the timeout + 5 s; srun's step must end; nothing of the job
may be left on any node. A clean run first: the program's status passes through (0)."""
import os
import re
import signal
import subprocess
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
TIMEOUT = 3
BOUND = TIMEOUT + 5
NODES = 3
layout = ["-N3", "--ntasks-per-node=1", "--kill-on-bad-exit=1", "-l"]
script = os.path.join(ctx.repo, "tests", "slurm", "torch_train_loop.py")


def job_pids(k):
    """The job's processes on node k: dtlaunch and the program."""
    return ctx.pids_in_node(k, ("dtlaunch", "python3"))


def srun(name, steps):
    out = os.path.join(ctx.outdir(name), "srun.out")
    argv = ["timeout", "-k", "5", "120", "srun"] + layout + [
        ctx.dtlaunch, "--watch", "--watch-timeout", str(TIMEOUT), "--grace", "2", "--",
        "/usr/bin/python3", script, str(steps)]
    with open(out, "w") as sink:
        return out, subprocess.Popen(argv, env=ctx.env, stdout=sink, stderr=subprocess.STDOUT,
                                     text=True)


# A clean run: the program's status (0) passes through, nobody is declared lost.
out, p = srun("clean", 30)
p.wait()
text = open(out).read()
ctx.eq(p.returncode, 0, f"clean run: srun's status\n{text[-2000:]}")
ctx.check("peer was lost" not in text, "clean run: no loss declared")

# name, victim node, fault, how the survivors must see it
CASES = [
    ("kill", 3, "kill", "exited"),
    ("freeze", 3, "stop", "frozen"),
    ("partition", 2, "link", "unreachable"),
    ("rank 0's node killed", 1, "kill", "exited"),
]
for i, (name, victim, fault, how) in enumerate(CASES):
    print(f"case {name}")
    out, job = srun(f"watch{i}", 100000)
    deadline = time.monotonic() + 90
    ready = False
    while time.monotonic() < deadline and job.poll() is None:
        ready = re.search(r"^\d+: step 20$", open(out).read(), re.M) is not None
        if ready:
            break
        time.sleep(0.05)
    if not ctx.check(ready, f"{name}: the job reached training"):
        job.kill()
        job.wait()
        print(open(out).read())
        continue
    if i == 0:
        # The footprint of --watch, on every node: one process (dtlaunch), two threads (its
        # main thread waiting on the program, the heartbeat's), under 5 MB of RSS.
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
    pids = job_pids(victim)
    ctx.check(len(pids) >= 2, f"{name}: dtlaunch and python3 found on the victim: {pids}")
    t0 = time.monotonic()
    if fault == "kill":
        for p in pids:
            os.kill(p, signal.SIGKILL)
    elif fault == "stop":
        for p in pids:
            os.kill(p, signal.SIGSTOP)
    else:
        r = ctx.set_link(victim, "down")
        ctx.eq(r.returncode, 0, f"{name}: eth0 down ({r.stderr.strip()})")
    survivors = [k - 1 for k in range(1, NODES + 1) if k != victim]  # one task per node: rank
    ended = None
    while time.monotonic() - t0 < BOUND + 30:
        if job.poll() is not None:
            ended = ended or time.monotonic() - t0
            break
        text = open(out).read()
        if ended is None and all(re.search(rf"^{r}: dtlaunch --watch: .*exit 76", text, re.M)
                                 for r in survivors):
            ended = time.monotonic() - t0
            if fault == "link":
                ctx.set_link(victim, "up")  # the cut-off task cannot tell srun; the others have
        time.sleep(0.05)
    if fault == "link":
        ctx.set_link(victim, "up")
    try:
        job.wait(timeout=60)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    step_end = time.monotonic() - t0
    text = open(out).read()
    print(f"  srun rc={job.returncode}; survivors done {ended if ended is not None else -1:.2f} s,"
          f" step ended {step_end:.2f} s after the fault")
    ctx.check(ended is not None and ended <= BOUND,
              f"{name}: the survivors' dtlaunch ended within {BOUND} s of the fault ({ended})")
    if fault != "link":
        ctx.check(step_end <= BOUND, f"{name}: srun's step ended {step_end:.1f} s after the fault")
    node = ctx.node(victim)
    for r in survivors:
        lines = re.findall(rf"^{r}: dtlaunch --watch: .*", text, re.M)
        ok = len(lines) == 1 and f"({node})" in lines[0] and how in lines[0]
        ctx.check(ok, f"{name}: rank {r} printed one line naming {node}, {how}: {lines}")
    codes = re.findall(r"srun: error: (\S+): tasks? ([\d\-,]+): Exited with exit code (\d+)", text)
    for r in survivors:
        ctx.check(any(c == "76" and str(r) in t.split(",") for _, t, c in codes),
                  f"{name}: task {r} exited 76: {codes}")
    for k in range(1, NODES + 1):
        ctx.eq(job_pids(k), [], f"{name}: processes of the job left on {ctx.node(k)}")
    if ctx.failures:
        print(text[-4000:])
ctx.finish()
