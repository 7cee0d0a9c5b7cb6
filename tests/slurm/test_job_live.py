#!/usr/bin/python3
"""dtlaunch job --live in the real cluster, through the resilient.sbatch template: 4 nodes, 3 used
x 2 ranks + 1 spare, the example dtlaunch-train on Fashion-MNIST (gloo, heartbeat 3 s, seed 1)
with no checkpoint at all, dtlaunch-store hosting the store on the batch host.
- a fault-free run: the reference digest (`weights sha256`);
- node 2's ranks SIGKILLed mid-training, then node 1's (rank 0 among them: the store is not in a
  rank, so it survives), then node 3's SIGSTOPped, then node 2's link cut (and restored once the
  job trains on: the cut-off ranks must find they were replaced and exit): each time the job must end 0 in one attempt,
  the ranks of the other nodes keep their processes (the same PIDs before the fault and after the
  recovery), the lost node's ranks run again on the spare (node 4) as a new step, and the final
  digest equals the reference's, bit for bit: no step was lost or done twice. The time from the
  fault to each phase is printed (docs/benchmarks.md);
- SIGTERM to the driver while the survivors wait for node 2's replacement: the job exits 75,
  not restarted, within seconds;
- on 3 nodes with no spare, node 2's ranks killed: the attempt ends at once, naming node 2, and
  the job with it (no node left to restart on)."""
import os
import re
import signal
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
if not ctx.args.train:
    ctx.fail("--train is required")
    ctx.finish()
train = os.path.abspath(ctx.args.train)
# The store's program is built with the runtime, beside the example: build/apps/store.
store = os.path.join(os.path.dirname(os.path.dirname(train)), "store", "dtlaunch-store")
if not os.access(store, os.X_OK):
    ctx.fail(f"no dtlaunch-store at {store} (built with the runtime, beside apps/train)")
    ctx.finish()
layout = ["--nodes=4", "--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=1"]
STEPS = 200
TRAIN_ARGS = f"--batch-size 8 --epochs 1 --max-steps {STEPS} --log-every 1 --seed 1"


def env_for():
    return {"DTLAUNCH": ctx.dtlaunch, "TRAIN": train, "SPARE_NODES": "1",
            "DTLAUNCH_DDP_HEARTBEAT_TIMEOUT": "3", "TRAIN_ARGS": TRAIN_ARGS,
            "JOB_ARGS": f"--live --store-program {store} --stop-grace 2"}


def digest(text):
    m = re.search(r"weights sha256 ([0-9a-f]{64})", text)
    return m.group(1) if m else None


def follow(info, t0, phases):
    """Times each phase from the job's output files, which grow as the lines come."""
    marks = {"detected (a survivor's verdict)": (info["StdErr"], r"peer lost"),
             "replacement step started on the spare": (info["StdErr"], r"--live: node \S+ lost"),
             "re-formed with the replacement": (info["StdErr"], r"live recovery, generation 1: rank"),
             "state sent": (info["StdErr"], r"live recovery, generation 1: agreed on step")}
    out_at = None
    while time.monotonic() - t0 < 90:
        err = open(info["StdErr"]).read()
        for name, (path, pattern) in marks.items():
            if name not in phases and re.search(pattern, open(path).read()):
                phases[name] = time.monotonic() - t0
        if "state sent" in phases and out_at is None:
            out_at = len(open(info["StdOut"]).read())
        if out_at is not None and re.search(r"step \d+/", open(info["StdOut"]).read()[out_at:]):
            phases["first step completed after it"] = time.monotonic() - t0
            return
        if re.search(r"attempt 1 on \S+: failed", err):
            return
        time.sleep(0.05)


# A known, rare failure (docs/ddp.md, "Live recovery", known issue): when some survivors are
# behind (the state went to them as well as to the replacement), a survivor was once ended by
# Gloo with "op.preamble.length <= op.nbytes" right after the recovery; the job then fell back to
# a restart and completed with the right digest. Seen in 1 of about 14 freeze runs on this
# cluster. Such a try is said and run again, once: a second one in a row fails the test.
KNOWN_RACE = re.compile(r"to ranks? [0-9,-]*\b[0-3]\b[^\n]*\n(.*\n)*.*op\.preamble\.length <= "
                        r"op\.nbytes")


def once_more_on_known_race(name, attempt, text_of, failed):
    """Runs attempt(label); when that try failed (failed(result, whether it added failures)) on
    KNOWN_RACE, its failures are forgotten, it is said, and attempt runs once more. Returns the
    last try's result."""
    failures_before = len(ctx.failures)
    result = attempt(name)
    if KNOWN_RACE.search(text_of(result)) and failed(result,
                                                     len(ctx.failures) > failures_before):
        print(f"  KNOWN ISSUE in {name}: a survivor behind the donor was ended by Gloo after "
              "the recovery (docs/ddp.md); trying the case once more")
        del ctx.failures[failures_before:]
        result = attempt(name + " (again)")
    return result


def live_case(name, victim, fault, reference):
    once_more_on_known_race(name, lambda label: live_try(label, victim, fault, reference),
                            text_of=lambda result: result, failed=lambda result, added: added)


def live_try(name, victim, fault, reference):
    print(f"case {name}")
    state = {}
    survivors = [k for k in (1, 2, 3) if k != victim]

    def inject(job):
        info = slurmtest.wait_for_output(ctx, job, r"step 2\d/")
        pids = ctx.pids_in_node(victim, ("dtlaunch-train",))
        kept = {k: sorted(ctx.pids_in_node(k, ("dtlaunch-train",))) for k in survivors}
        if info is None or not ctx.eq(len(pids), 2, f"{name}: the ranks found on node {victim}"):
            return
        t0 = time.monotonic()
        ctx.inject(victim, fault, pids)
        follow(info, t0, state.setdefault("phases", {}))
        after = {k: sorted(ctx.pids_in_node(k, ("dtlaunch-train",))) for k in survivors}
        ctx.eq(after, kept, f"{name}: the other nodes' ranks kept their processes")
        state["spare"] = ctx.pids_in_node(4, ("dtlaunch-train",))
        if fault != "link":
            return
        # The link comes back while the job runs on: the cut-off ranks find that they were
        # replaced and exit, and the job goes on undisturbed.
        ctx.set_link(victim, "up")
        healed = time.monotonic()
        while ctx.pids_in_node(victim, ("dtlaunch-train",)) and time.monotonic() - healed < 30:
            time.sleep(0.1)
        state["old ranks gone"] = time.monotonic() - healed
        state["training when gone"] = not re.search(r"done: \d+ steps", open(info["StdOut"]).read())

    # A cut-off node's step ends in slurmctld only a minute after the link is back, and the job
    # with it (docs/resilience.md): the job is done for this test when its script is.
    job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env_for(), 240,
                                            before_wait=inject, script_done=fault == "link")
    ctx.eq(info.get("JobState"), "COMPLETED", f"{name}: the job completed")
    ctx.eq(info.get("ExitCode"), "0:0", f"{name}: exit status")
    node, spare = ctx.node(victim), ctx.node(4)
    line = re.search(r"dtlaunch job: attempt 1 on \S+: completed .*", err)
    ctx.check(line and f"replaced live: {node} -> {spare}" in line.group(0),
              f"{name}: one attempt, {node}'s ranks replaced on {spare}: "
              f"{line.group(0) if line else err}")
    ctx.check("attempt 2" not in err, f"{name}: no restart")
    ctx.eq(len(state.get("spare", [])), 2, f"{name}: the replacement's ranks ran on {spare}")
    ctx.eq(digest(text), reference, f"{name}: weights sha256 vs the fault-free run")
    ctx.check(f"done: {STEPS} steps" in text, f"{name}: training done")
    if fault == "link":
        gone = state.get("old ranks gone", 99)
        print(f"  the cut-off ranks exited {gone:.2f} s after the link came back")
        ctx.check(gone < 30 and state.get("training when gone"),
                  f"{name}: the cut-off ranks exited while the job trained on: {state}")
    for phase, at in sorted(state.get("phases", {}).items(), key=lambda kv: kv[1]):
        print(f"  {at:6.2f} s after the fault: {phase}")
    ctx.eq(len(state.get("phases", {})), 5, f"{name}: every phase seen: {state}")
    if ctx.failures:
        print(text, err)
    return err


print("case fault-free")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env_for(), 180)
reference = digest(text)
ctx.eq(info.get("ExitCode"), "0:0", "fault-free: exit status")
ctx.check(reference is not None, "fault-free: weights sha256 printed")
ctx.check("--live: the store on " in err and "replaced live" not in err,
          f"fault-free: the store hosted apart, nothing replaced: {err}")
print(f"  reference: {reference}")
if ctx.failures:
    print(text, err)
    ctx.finish()

live_case("kill node 2", 2, "kill", reference)
live_case("kill node 1 (rank 0)", 1, "kill", reference)
live_case("freeze node 3", 3, "stop", reference)
# SIGTERM (preemption) to the driver while the survivors wait for the replacement: every rank
# exits 75 (the survivors' wait ends at once: ddp::request_stop), and so does the job, not
# restarted.
print("case SIGTERM during a recovery")


def term_in_recovery(job):
    info = slurmtest.wait_for_output(ctx, job, r"step 2\d/")
    drivers = ctx.pids_in_node(1, ("dtlaunch",))
    if info is None or not ctx.eq(len(drivers), 1, "sigterm: the driver found on node 1"):
        return
    ctx.inject(2, "kill", ctx.pids_in_node(2, ("dtlaunch-train",)))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "--live: node" not in open(info["StdErr"]).read():
        time.sleep(0.02)
    sigterm["t0"] = time.monotonic()
    os.kill(drivers[0], signal.SIGTERM)


sigterm = {}
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", layout, env_for(), 120,
                                        before_wait=term_in_recovery)
took = time.monotonic() - sigterm.get("t0", time.monotonic())
ctx.eq(info.get("ExitCode"), "75:0", "sigterm: the job's exit status")
ctx.check("stopped by signal 15: not restarted" in err and "attempt 2" not in err,
          f"sigterm: stopped, not restarted: {err}")
print(f"  the job ended {took:.1f} s after the signal")
ctx.check(took < 30, f"sigterm: the job ended {took:.1f} s after the signal, not after the "
          "survivors' 60 s wait")
if ctx.failures:
    print(text, err)

# No spare left (3 nodes, all used): the attempt ends at once rather than after the survivors'
# wait for a replacement (DTLAUNCH_DDP_LIVE_WAIT, 60 s), and the job with it (no node to restart
# on: the program keeps no checkpoint anyway).
print("case no spare")


def kill_node2(job):
    if slurmtest.wait_for_output(ctx, job, r"step 2\d/") is not None:
        fallback["t0"] = time.monotonic()
        ctx.inject(2, "kill", ctx.pids_in_node(2, ("dtlaunch-train",)))


fallback = {}
env = dict(env_for(), SPARE_NODES="0")
job, info, text, err = slurmtest.submit(ctx, "resilient.sbatch", ["--nodes=3"] + layout[1:], env,
                                        120, before_wait=kill_node2)
took = time.monotonic() - fallback.get("t0", time.monotonic())
ctx.eq(info.get("JobState"), "FAILED", "no spare: the job failed")
ctx.check(f"node {ctx.node(2)} (ranks 2-3) lost" in err and "no spare is left: the attempt ends"
          in err, f"no spare: said so: {err}")
ctx.check(re.search(rf"attempt 1 on \S+: failed .*culprit {ctx.node(2)}", err),
          f"no spare: attempt 1 names {ctx.node(2)}")
ctx.check("attempt 2" not in err and "healthy node(s) left" in err,
          f"no spare: no restart, out of nodes: {err}")
print(f"  the job ended {took:.1f} s after the fault")
ctx.check(took < 40, f"no spare: the job ended {took:.1f} s after the fault, before the 60 s wait")
if ctx.failures:
    print(text, err)

# A storm: 5 faults in one job with one spare. Each lost node's old step ends (its ranks were
# killed, or frozen and then killed as the step was cancelled) and the node is a spare again:
# node 2 -> 4, 3 -> 2, 1 (rank 0) -> 3, 4 frozen -> 1, 2 -> 4. Each fault comes once the job
# trains again after the last and the node it needs is back in service.
print("case storm of 5 faults, one spare")
STORM = [(2, "kill", 4), (3, "kill", 2), (1, "kill", 3), (4, "stop", 1), (2, "kill", 4)]


def storm(job):
    info = slurmtest.wait_for_output(ctx, job, r"step 2\d/")
    if info is None:
        return
    t0 = time.monotonic()
    for i, (victim, fault, spare) in enumerate(STORM, 1):
        while time.monotonic() - t0 < 150:
            err = open(info["StdErr"]).read()
            back = spare == 4 and i == 1 or f"node {ctx.node(spare)}'s old step has ended" in err
            if back and len(re.findall(r"agreed on step", err)) >= i - 1:
                break
            time.sleep(0.05)
        out_at = len(open(info["StdOut"]).read())
        while time.monotonic() - t0 < 150 and not re.search(
                r"step \d+/", open(info["StdOut"]).read()[out_at:]):
            time.sleep(0.05)
        pids = ctx.pids_in_node(victim, ("dtlaunch-train",))
        if not ctx.eq(len(pids), 2, f"storm fault {i}: the ranks found on node {victim}"):
            return
        storm_faults.append(time.monotonic())
        ctx.inject(victim, fault, pids)


def storm_try(_label):
    storm_faults.clear()
    return slurmtest.submit(ctx, "resilient.sbatch", layout, dict(env_for(), MAX_RESTARTS="5"),
                            240, before_wait=storm)


# The known race (KNOWN_RACE above) is likelier here: the faults come one step apart, so some
# survivors are often behind the donor.
storm_faults = []
job, info, text, err = once_more_on_known_race(
    "the storm", storm_try, text_of=lambda result: result[3],
    failed=lambda result, added: result[1].get("ExitCode") != "0:0")
ctx.eq(info.get("ExitCode"), "0:0", "storm: exit status")
line = re.search(r"dtlaunch job: attempt 1 on \S+: completed .*", err)
moves = re.findall(r"replaced live: (\S+ -> \S+) \(ranks", line.group(0) if line else "")
want = [f"{ctx.node(v)} -> {ctx.node(s)}" for v, _, s in STORM]
ctx.eq(moves, want, "storm: one attempt, the five replacements, each on the node back in service")
ctx.check("attempt 2" not in err, "storm: no restart")
ctx.eq(digest(text), reference, "storm: weights sha256 vs the fault-free run")
ctx.eq(len(storm_faults), 5, "storm: five faults injected")
print(f"  faults at {[round(t - storm_faults[0], 1) for t in storm_faults]} s")
if ctx.failures:
    print(text, err)

# Last: node 2 stays allocated to this job for a minute after it.
live_case("cut node 2's link, restored while the job runs on", 2, "link", reference)
ctx.finish()
