#!/usr/bin/python3
"""An unmodified PyTorch gloo DDP-style training loop for `dtlaunch --watch`: env:// rendezvous,
then all_reduce of a small gradient-sized tensor in a loop, "step N" every 10 steps. Knows
nothing of dtlaunch; runs STEPS steps (default: long enough to be interrupted).

`torch_train_loop.py STEPS CHECKPOINT`: also the torchrun way of surviving a restart. Rank 0
saves its state every 10 steps (write, then rename), every rank resumes from the file when it
exists, and TORCHELASTIC_RESTART_COUNT says which attempt this is."""
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
checkpoint = sys.argv[2] if len(sys.argv) > 2 else None
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=600))
rank, world = dist.get_rank(), dist.get_world_size()
grad = torch.ones(4096)
weights = torch.zeros(4096)
first = 1
if checkpoint:
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "unset")
    if os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        weights, first = state["weights"], state["step"] + 1
    if rank == 0:
        print(f"restart {restart}: starting at step {first}", flush=True)
for step in range(first, steps + 1):
    dist.all_reduce(grad)
    grad.div_(world)
    weights.add_(grad)
    time.sleep(0.02)  # the "forward and backward"
    if step % 10 == 0:
        print(f"step {step}", flush=True)
        if checkpoint and rank == 0:
            torch.save({"weights": weights, "step": step}, checkpoint + ".tmp")
            os.replace(checkpoint + ".tmp", checkpoint)
if checkpoint and rank == 0:
    print(f"done: {steps} steps, weights {weights[0].item():.0f}", flush=True)
dist.destroy_process_group()
