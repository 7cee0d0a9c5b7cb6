"""Shared helpers for the end-to-end tests that run dtlaunch under the real test cluster.

Every driver is `/usr/bin/python3 test_x.py --dtlaunch BIN --probe BIN --repo DIR --work DIR`.
It talks to the cluster that the ctest fixture brought up (scripts/slurm-cluster.sh, base dir in
SLURM_NETNS_DIR), wraps every Slurm command in a timeout, and collects failures so one run
reports all of them. Exit: 0 pass, 1 fail, 77 skip (only where the machine cannot run a cluster
and CI is not set).
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77


class Ctx:
    def __init__(self, description):
        p = argparse.ArgumentParser(description=description)
        p.add_argument("--dtlaunch", required=True)
        p.add_argument("--probe", required=True)
        p.add_argument("--repo", required=True)
        p.add_argument("--work", required=True, help="scratch dir on the shared filesystem")
        p.add_argument("--train", default="", help="dtlaunch-train, when it was built")
        self.args = p.parse_args()
        self.dtlaunch = os.path.abspath(self.args.dtlaunch)
        self.probe = os.path.abspath(self.args.probe)
        self.repo = os.path.abspath(self.args.repo)
        self.cluster_script = os.path.join(self.repo, "scripts", "slurm-cluster.sh")
        self.failures = []
        self._require_cluster()
        self.work = os.path.abspath(self.args.work)
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.wait_all_idle()

    # ---- cluster -------------------------------------------------------------------------
    def _require_cluster(self):
        check = subprocess.run([self.cluster_script, "check"], capture_output=True, text=True)
        if check.returncode != 0:
            why = check.stdout.strip() or check.stderr.strip()
            if os.environ.get("CI") == "true":
                print(f"FAIL: CI=true but this machine cannot run the Slurm test cluster: {why}")
                sys.exit(1)
            print(f"SKIP: this machine cannot run the Slurm test cluster: {why}")
            sys.exit(SKIP)
        env = subprocess.run([self.cluster_script, "env"], capture_output=True, text=True)
        if env.returncode != 0:
            print("FAIL: the Slurm test cluster is not up (the slurm.cluster_up fixture failed?): "
                  + env.stderr.strip())
            sys.exit(1)
        self.env = dict(os.environ)
        for line in env.stdout.splitlines():
            name, _, value = line.removeprefix("export ").partition("=")
            self.env[name] = value
        self.prefix = self.env["SLURM_NETNS_PREFIX"]
        self.subnet = self.env["SLURM_NETNS_SUBNET"]
        self.nodes = int(self.env["SLURM_NETNS_NODES"])

    def node(self, k):
        """Name of node k (1-based)."""
        return f"{self.prefix}{k}"

    def node_addr(self, k):
        return f"{self.subnet}.{10 + k}"

    # ---- fault injection in node k's network namespace ----------------------------------
    def netns(self, k):
        return os.environ.get("SLURM_NETNS_NS_PREFIX", "") + self.node(k)

    def pids_in_node(self, k, names):
        """The processes in node k's namespace whose /proc/PID/comm is one of `names` (so not
        slurmd's nor slurmstepd's)."""
        p = subprocess.run(["ip", "netns", "pids", self.netns(k)], capture_output=True, text=True)
        pids = []
        for pid in p.stdout.split():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() in names:
                        pids.append(int(pid))
            except OSError:
                pass
        return pids

    def inject(self, k, fault, pids):
        """The fault on node k: SIGKILL ("kill") or SIGSTOP ("stop") of `pids`, or its eth0 down
        ("link")."""
        if fault == "link":
            r = self.set_link(k, "down")
            self.eq(r.returncode, 0, f"eth0 down on {self.node(k)} ({r.stderr.strip()})")
            return
        for p in pids:
            os.kill(p, signal.SIGKILL if fault == "kill" else signal.SIGSTOP)

    def fault_case(self, name, argv, env, ready, victim, fault, pids, survivors_done, bound):
        """Runs `argv` (an srun; under `timeout`, so a hang fails the case) with its output in a file, waits until
        ready(output) holds, injects `fault` on node `victim` (see inject; pids() names the
        processes), then follows the step to its end. A cut-off node's tasks cannot tell srun, so
        its link comes back once survivors_done(output) holds. Checks that the survivors were
        done, and (but for a partition) that srun ended, within `bound` seconds of the fault.
        Returns srun's output, or None when the job never reached the moment of the fault."""
        out = os.path.join(self.outdir(re.sub(r"\W+", "_", name)), "srun.out")
        with open(out, "w") as sink:
            srun = subprocess.Popen(["timeout", "-k", "5", "120"] + list(argv), env=env, stdout=sink, stderr=subprocess.STDOUT,
                                    text=True)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and srun.poll() is None and not ready(open(out).read()):
            time.sleep(0.05)
        if not self.check(srun.poll() is None and ready(open(out).read()),
                          f"{name}: the job reached the moment of the fault"):
            srun.terminate()  # timeout passes SIGTERM on to srun, which cancels its step
            srun.wait()
            print(open(out).read()[-4000:])
            return None
        victims = pids()
        t0 = time.monotonic()
        self.inject(victim, fault, victims)
        ended = None
        while time.monotonic() - t0 < bound + 30 and srun.poll() is None:
            if ended is None and survivors_done(open(out).read()):
                ended = time.monotonic() - t0
                if fault == "link":
                    self.set_link(victim, "up")
            time.sleep(0.05)
        if ended is None and srun.poll() is not None:
            ended = time.monotonic() - t0
        if fault == "link":
            self.set_link(victim, "up")
        try:
            srun.wait(timeout=60)
        except subprocess.TimeoutExpired:
            srun.terminate()
            srun.wait()
        step_end = time.monotonic() - t0
        print(f"  srun rc={srun.returncode}; survivors done "
              f"{ended if ended is not None else -1:.2f} s, step ended {step_end:.2f} s after "
              "the fault")
        self.check(ended is not None and ended <= bound,
                   f"{name}: the survivors ended within {bound} s of the fault ({ended})")
        if fault != "link":
            self.check(step_end <= bound,
                       f"{name}: srun's step ended {step_end:.1f} s after the fault")
        return open(out).read()

    def set_link(self, k, state):
        """`ip link set eth0 up|down` inside node k's namespace."""
        return subprocess.run(["ip", "netns", "exec", self.netns(k), "ip", "link", "set", "eth0",
                               state], capture_output=True, text=True)

    # ---- running -------------------------------------------------------------------------
    def run(self, argv, timeout=60, env=None, cwd=None):
        """Runs argv under `timeout`, so a hang becomes a failure, never a stuck suite."""
        full_env = dict(self.env)
        full_env.update(env or {})
        t0 = time.monotonic()
        p = subprocess.run(["timeout", "-k", "5", str(timeout)] + list(argv), capture_output=True,
                           text=True, env=full_env, cwd=cwd or self.work)
        p.elapsed = time.monotonic() - t0
        if p.returncode == 124:
            self.fail(f"timed out after {timeout} s: {' '.join(argv)}")
        return p

    def srun(self, srun_args, program, timeout=60, env=None):
        return self.run(["srun"] + list(srun_args) + [self.dtlaunch, "--"] + list(program), timeout,
                        env)

    def scontrol_job(self, job_id):
        p = self.run(["scontrol", "-o", "show", "job", str(job_id)], timeout=10)
        fields = {}
        for token in p.stdout.split():
            k, _, v = token.partition("=")
            fields.setdefault(k, v)
        return fields

    def job_id_by_name(self, name, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.run(["squeue", "-h", "-n", name, "-o", "%i"], timeout=10)
            if p.stdout.strip():
                return p.stdout.split()[0]
            time.sleep(0.1)
        self.fail(f"no job named {name} appeared in squeue within {timeout} s")
        return None

    def wait_for_files(self, paths, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(os.path.exists(p) for p in paths):
                return True
            time.sleep(0.05)
        missing = [p for p in paths if not os.path.exists(p)]
        self.fail(f"{len(missing)} file(s) never appeared within {timeout} s, e.g. {missing[0]}")
        return False

    # ---- probe records -------------------------------------------------------------------
    def outdir(self, name):
        d = os.path.join(self.work, name)
        os.makedirs(d, exist_ok=True)
        return d

    def probe_argv(self, out, tag="probe", *extra):
        return [self.probe, "--out", out, "--tag", tag] + list(extra)

    @staticmethod
    def read_record(path):
        rec = {}
        with open(path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                rec[k] = v
        return rec

    def records(self, out, tag="probe", suffix=".env"):
        """{rank: record} for every OUT/TAG.rank<R><suffix>."""
        recs = {}
        for name in os.listdir(out):
            if name.startswith(tag + ".rank") and name.endswith(suffix):
                rank = name[len(tag) + 5:-len(suffix)]
                recs[int(rank) if rank.isdigit() else rank] = self.read_record(os.path.join(out, name))
        return recs

    # ---- checks --------------------------------------------------------------------------
    def fail(self, msg):
        self.failures.append(msg)
        print(f"  FAIL {msg}", flush=True)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)
        return cond

    def eq(self, got, want, what):
        return self.check(got == want, f"{what}: got {got!r}, want {want!r}")

    def show(self, p):
        """The whole story of a command, printed when something about it failed."""
        print(f"    rc={p.returncode} elapsed={p.elapsed:.2f}s\n    argv={p.args}")
        for stream, text in (("stdout", p.stdout), ("stderr", p.stderr)):
            for line in text.splitlines()[:40]:
                print(f"    {stream}: {line}")

    def wait_all_idle(self, timeout=120):
        """Waits, at a scenario's start, until every node is idle: a scenario that cut a node off
        leaves it allocated (completing, or down until its slurmd answers) for up to a minute,
        and this one may want any node. Waiting here rather than at the end of the scenario that
        cut it off keeps the wait out of that scenario's locks (slurm.job holds the torch
        tests' too); cluster_fixture.sh down checks the last scenario's leftovers."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        while True:
            p = self.run(["sinfo", "-h", "-N", "-o", "%N %t"], timeout=10)
            busy = [line for line in p.stdout.splitlines() if not line.endswith(" idle")]
            if p.returncode == 0 and not busy:
                if time.monotonic() - t0 > 1:
                    print(f"waited {time.monotonic() - t0:.1f} s for every node to be idle first")
                return
            if time.monotonic() >= deadline:
                print(f"FAIL: nodes not idle {timeout} s after an earlier scenario: "
                      f"{busy or p.stderr}")
                sys.exit(1)
            time.sleep(0.5)

    def finish(self):
        if self.failures:
            print(f"{len(self.failures)} failure(s)")
            sys.exit(1)
        print("all checks passed")
        sys.exit(0)



def node_sort_key(name):
    digits = name.rstrip("0123456789")
    return (digits, int(name[len(digits):] or 0))


def check_step(ctx, recs, world, placement=None, master_host=None, what="step"):
    """Checks the torchrun contract dtlaunch exported on every rank of one step against what the
    ranks observed themselves (host names, addresses, pids), not against Slurm's variables.

    placement: expected index (in the step's sorted node list) of the node of each rank.
    master_host: the node rank 0 must run on when it is not the first node of the step.
    Returns {rank: host}."""
    if not ctx.eq(sorted(recs), list(range(world)), f"{what}: ranks that wrote a record"):
        return {}
    host = {r: rec["probe.hostname"] for r, rec in recs.items()}
    hosts = sorted(set(host.values()), key=node_sort_key)
    env = {r: {k[4:]: v for k, v in rec.items() if k.startswith("env.")} for r, rec in recs.items()}
    for name in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES"):
        ctx.eq(len({e.get(name) for e in env.values()}), 1, f"{what}: distinct {name} values")
    master = env[0].get("MASTER_ADDR")
    port = env[0].get("MASTER_PORT", "")
    ctx.check(port.isdigit() and 1024 <= int(port) < 65536, f"{what}: MASTER_PORT={port!r}")
    ctx.eq(master, host[0], f"{what}: MASTER_ADDR vs the host rank 0 runs on")
    if master_host:
        ctx.eq(host[0], master_host, f"{what}: node of rank 0")
    k0 = int(host[0][len(ctx.prefix):])
    ctx.check(ctx.node_addr(k0) in recs[0]["probe.addrs"].split(","),
              f"{what}: rank 0's addresses {recs[0]['probe.addrs']} lack {ctx.node_addr(k0)}")
    if placement is not None:
        ctx.eq([hosts.index(host[r]) for r in range(world)], placement, f"{what}: placement")
    for r in range(world):
        e = env[r]
        same_node = sorted(q for q in range(world) if host[q] == host[r])
        want = {
            "RANK": str(r),
            "WORLD_SIZE": str(world),
            "LOCAL_RANK": str(same_node.index(r)),
            "LOCAL_WORLD_SIZE": str(len(same_node)),
            "NODE_RANK": str(hosts.index(host[r])),
            "GROUP_RANK": str(hosts.index(host[r])),
            "NNODES": str(len(hosts)),
            "GROUP_WORLD_SIZE": str(len(hosts)),
            "ROLE_RANK": str(r),
            "ROLE_WORLD_SIZE": str(world),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "SLURMD_NODENAME": host[r],  # the node name is the host name: namespaces work
            "SLURM_TASK_PID": recs[r]["probe.pid"],  # dtlaunch exec'd: the task is the program
        }
        for name, value in want.items():
            ctx.eq(e.get(name), value, f"{what}: rank {r} on {host[r]}: {name}")
        ok = recs[r].get("probe.rendezvous", "ok").startswith("ok")
        ctx.check(ok, f"{what}: rank {r} rendezvous: {recs[r].get('probe.rendezvous')}")
    return host


# ---- batch jobs ------------------------------------------------------------------------------
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def submit(ctx, template, extra, env, timeout, before_wait=None, script_done=False):
    """sbatch --parsable of scripts/sbatch/TEMPLATE in the work dir, then poll scontrol until the
    job is final (with script_done, until its script has ended: COMPLETING counts, a state
    reported as COMPLETED); before_wait(job) runs in between. Returns (job id, scontrol fields,
    stdout text, stderr text)."""
    path = os.path.join(ctx.repo, "scripts", "sbatch", template)
    p = ctx.run(["sbatch", "--parsable", f"--chdir={ctx.work}"] + extra + [path], env=env,
                timeout=20)
    if not ctx.eq(p.returncode, 0, f"{template}: sbatch rc ({p.stderr.strip()})"):
        return None, {}, "", ""
    job = p.stdout.strip().split(";")[0]
    if before_wait:
        before_wait(job)
    deadline = time.monotonic() + timeout
    info = {}
    while time.monotonic() < deadline:
        info = ctx.scontrol_job(job)
        if script_done and info.get("JobState") == "COMPLETING":
            info["JobState"] = "COMPLETED" if info.get("ExitCode") == "0:0" else "FAILED"
        if info.get("JobState") in FINAL:
            break
        time.sleep(0.25)
    else:
        ctx.fail(f"{template}: job {job} not done within {timeout} s: {info.get('JobState')}")
        ctx.run(["scancel", job], timeout=10)
    texts = []
    for key in ("StdOut", "StdErr"):
        f = info.get(key, "")
        texts.append(open(f).read() if f and os.path.exists(f) else "")
    print(f"  job {job}: {info.get('JobState')} ExitCode={info.get('ExitCode')} "
          f"Restarts={info.get('Restarts')} {info.get('StdOut')}")
    return job, info, texts[0], texts[1]



def wait_for_output(ctx, job, pattern, timeout=120):
    """Waits until the job's stdout matches pattern; returns scontrol's fields, or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = ctx.scontrol_job(job)
        out = info.get("StdOut", "")
        if out and os.path.exists(out) and re.search(pattern, open(out).read()):
            return info
        time.sleep(0.05)
    ctx.fail(f"job {job}: no output matching {pattern!r} within {timeout} s")
    return None


def check_done(ctx, name, info, out, err, want_name, want_limit):
    ctx.eq(info.get("JobState"), "COMPLETED", f"{name}: final state")
    ctx.eq(info.get("ExitCode"), "0:0", f"{name}: exit code")
    ctx.eq(info.get("JobName"), want_name, f"{name}: job name from the template")
    ctx.eq(info.get("TimeLimit"), want_limit, f"{name}: time limit from the template")
    ctx.check(os.path.basename(info.get("StdOut", "")).startswith(want_name + "-"),
              f"{name}: output file {info.get('StdOut')} named by the template's --output")
    ctx.check(not [l for l in err.splitlines() if l.startswith("dtlaunch: ")],
              f"{name}: dtlaunch errors in the job's stderr: {err!r}")
    if info.get("JobState") != "COMPLETED":
        print(out, err)
