#!/usr/bin/python3
"""Scenario 5: failures and signals under real Slurm. A rank that exits 3 with
--kill-on-bad-exit=1 makes srun end the others at once (Slurm then reports the largest status,
143 = 128+SIGTERM, not 3); without it srun waits and reports 3. `scancel --signal` reaches the
program itself, because dtlaunch exec'd it and nothing stands in between."""
import os
import signal
import subprocess
import time

import slurmtest

ctx = slurmtest.Ctx(__doc__)
layout = ["-N3", "-n6", "--ntasks-per-node=2"]

# name, extra srun options, probe options, want srun rc, want signal on the other ranks,
# elapsed bound (s): (min, max)
CASES = [
    ("rank 2 exits 3, --kill-on-bad-exit=1", ["--kill-on-bad-exit=1"], ["--hold", "60"], 143,
     "SIGTERM", (0, 15)),
    ("rank 2 exits 3, no kill-on-bad-exit", ["--kill-on-bad-exit=0"], ["--hold", "3"], 3, None,
     (3, 20)),
]
for i, (name, opts, probe_opts, want_rc, want_sig, (t_min, t_max)) in enumerate(CASES):
    print(f"case {name}")
    out = ctx.outdir(f"fail{i}")
    p = ctx.srun(layout + opts, ctx.probe_argv(out, "probe", "--fail-rank", "2", "--fail-code",
                                               "3", *probe_opts), timeout=60)
    print(f"  srun rc={p.returncode} in {p.elapsed:.2f} s")
    if not ctx.eq(p.returncode, want_rc, f"{name}: srun exit status"):
        ctx.show(p)
    ctx.check(t_min <= p.elapsed <= t_max, f"{name}: srun took {p.elapsed:.1f} s, want "
              f"{t_min}..{t_max} s")
    ctx.eq(sorted(ctx.records(out)), list(range(6)), f"{name}: ranks that started")
    sigs = {r: rec.get("signal") for r, rec in ctx.records(out, suffix=".signal").items()}
    want = {r: want_sig for r in range(6) if r != 2} if want_sig else {}
    ctx.eq(sigs, want, f"{name}: signals the other ranks received")

# scancel --signal: the probes trap the signal and exit 128+signo.
for sig in ("USR1", "TERM"):
    name = f"scancel --signal={sig}"
    print(f"case {name}")
    out = ctx.outdir(f"sig{sig}")
    job_name = f"dtl-sig-{sig}-{os.getpid()}"
    argv = ["timeout", "-k", "5", "60", "srun", "-J", job_name] + layout + [
        ctx.dtlaunch, "--"] + ctx.probe_argv(out, "probe", "--hold", "60")
    srun = subprocess.Popen(argv, env=ctx.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    job = ctx.job_id_by_name(job_name)
    ready = ctx.wait_for_files([os.path.join(out, f"probe.rank{r}.env") for r in range(6)])
    if job and ready:
        t0 = time.monotonic()
        s = ctx.run(["scancel", f"--signal={sig}", job], timeout=20)
        ctx.eq(s.returncode, 0, f"{name}: scancel rc ({s.stderr.strip()})")
    try:
        stdout, stderr = srun.communicate(timeout=70)
    except subprocess.TimeoutExpired:
        srun.kill()
        stdout, stderr = srun.communicate()
    waited = time.monotonic() - t0 if job and ready else -1
    print(f"  srun rc={srun.returncode}, ended {waited:.2f} s after scancel")
    signo = getattr(signal, "SIG" + sig)
    ctx.eq(srun.returncode, 128 + signo, f"{name}: srun exit status (the probes exit 128+signo)")
    ctx.check(0 <= waited < 10, f"{name}: srun ended {waited:.1f} s after scancel")
    recs = ctx.records(out)
    sigs = {r: rec.get("signal") for r, rec in ctx.records(out, suffix=".signal").items()}
    ctx.eq(sigs, {r: "SIG" + sig for r in range(6)}, f"{name}: signal recorded by each rank")
    senders = {rec.get("sender_comm") for rec in ctx.records(out, suffix=".signal").values()}
    ctx.eq(senders, {"slurmstepd"}, f"{name}: sender of the signal (nothing in between)")
    for r, rec in recs.items():  # the signalled process is the task Slurm started
        ctx.eq(rec["probe.pid"], rec.get("env.SLURM_TASK_PID"), f"{name}: rank {r} pid")
    if srun.returncode != 128 + signo:
        print(stdout, stderr)
ctx.finish()
