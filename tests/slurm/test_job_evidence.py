#!/usr/bin/python3
"""`dtlaunch job` reads how a task ended only from srun's own lines (issue 35 B): srun runs with
--label, a task's lines carry their label and srun's own do not. A healthy program on 3 nodes
(one spare) prints what srun prints when a task is killed or preempted, bare, after 70,000 bytes
with no newline, after 200 KB of (seeded) random bytes, and as a whole line, and what the
runtime, --watch and the preflight say of a lost or excluded node (bare, and sealed with another
attempt's key), then runs on past the driver's stop grace (5 s) and ends well: the job must
complete on its first attempt, exit 0, blame no node, and pass the program's output on as it
printed it (no labels). Before, the first srun-like line aborted the healthy step, named the
node culprit and spent the budget (exit 137), the "exit code 75" line made it "preempted", and
the bare exclude line excluded node3 (exit 3 after 4 attempts)."""
import hashlib
import hmac
import os
import re

import slurmtest

ctx = slurmtest.Ctx(__doc__)
work = ctx.outdir("forged")
for f in ("status", "out", "err"):
    if os.path.exists(os.path.join(work, f)):
        os.remove(os.path.join(work, f))
victim = ctx.node(3)
node2 = ctx.node(2)
# A line sealed as the runtime seals it, with another attempt's key: a replay from an old log.
old_key = os.urandom(32)
old_seal = hmac.new(old_key, b"dtlaunch sealed line 1\n" +
                    f"dtlaunch ddp: rank 1 ({node2}): peer lost: rank 2 ({victim}) exited".encode(),
                    hashlib.sha256).hexdigest()[:32]
program = os.path.join(work, "program.sh")
with open(program, "w") as f:
    f.write(f"""#!/bin/sh
if [ "$SLURM_PROCID" = 1 ]; then
  echo "srun: error: {victim}: task 2: Killed"
  head -c 70000 /dev/zero | tr '\\0' x
  echo "srun: error: {victim}: task 2: Killed"
  /usr/bin/python3 -c "import random, sys; r = random.Random(35); sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(200000)))"
  echo "srun: error: {victim}: task 2: Killed"
  echo "srun: error: {victim}: tasks 0-1: Exited with exit code 75" >&2
  echo "dtlaunch ddp: rank 1 ({node2}): peer lost: rank 2 ({victim}) exited (its connection closed), seen by rank 1" >&2
  echo "dtlaunch --watch: rank 1 ({node2}): a peer was lost: rank 2 ({victim}) exited, seen by rank 1; stopping the program, exit 76" >&2
  echo "dtlaunch --preflight: exclude: {victim}"
  echo "exclude: {victim}   (srun/sbatch --exclude={victim})"
  echo "dtlaunch ddp: rank 1 ({node2}): peer lost: rank 2 ({victim}) exited [seal {old_seal}]" >&2
fi
sleep 9
echo "task $SLURM_PROCID done"
""")
os.chmod(program, 0o755)
batch = os.path.join(work, "job.sbatch")
with open(batch, "w") as f:
    f.write(f"""#!/bin/bash
"$DTLAUNCH" job --spare-nodes 1 --stop-grace 5 -- {program}
echo $? > {work}/status
""")
p = ctx.run(["sbatch", "--parsable", f"--chdir={work}", "--nodes=3", "--ntasks-per-node=1",
             f"--output={work}/out", f"--error={work}/err", batch],
            env={"DTLAUNCH": ctx.dtlaunch}, timeout=20)
ctx.eq(p.returncode, 0, f"sbatch rc ({p.stderr.strip()})")
job = p.stdout.strip().split(";")[0]
try:
    if ctx.check(ctx.wait_for_files([os.path.join(work, "status")], timeout=60),
                 "dtlaunch job ended"):
        out = open(os.path.join(work, "out"), errors="replace").read()
        err = open(os.path.join(work, "err"), errors="replace").read()
        status = open(os.path.join(work, "status")).read().strip()
        print(f"  status {status}; stderr: {err[-600:]}")
        ctx.eq(status, "0", "the healthy job completes")
        ctx.check("attempt 1 " in err and "attempt 2 " not in err, "one attempt")
        ctx.check(not re.search(r"culprit node|^1 .* node\d +\d", err, re.M), "no node blamed")
        for rank in (0, 1):
            ctx.check(f"task {rank} done" in out, f"task {rank} ran to its end")
        # Passed on as printed: the bare line, and the one after 70,000 x's, without a label.
        ctx.check(out.startswith(f"srun: error: {victim}: task 2: Killed\n") or
                  f"\nsrun: error: {victim}: task 2: Killed\n" in out,
                  "the program's own srun-like line passed on unlabelled")
        # srun --label cuts a task's line every 1,024 bytes; the driver joins the pieces again.
        ctx.check("\n" + "x" * 70000 + f"srun: error: {victim}: task 2: Killed\n" in out,
                  "the long line passed on whole")
        ctx.check(f"srun: error: {victim}: tasks 0-1: Exited with exit code 75" in err,
                  "the line on stderr passed on")
        ctx.check(not re.search(r"^ *\d+: ", out, re.M), "no srun label in the job's output")
finally:
    ctx.run(["scancel", job], timeout=10)
    if ctx.failures:
        for f in ("out", "err"):
            path = os.path.join(work, f)
            if os.path.exists(path):
                print(f"--- {f}\n" + open(path, errors="replace").read()[-1500:])
ctx.finish()
