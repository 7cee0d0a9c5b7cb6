#!/usr/bin/python3
"""An unmodified PyTorch gloo DDP-style training loop for `dtlaunch --watch`: env:// rendezvous,
then all_reduce of a small gradient-sized tensor in a loop, "step N" every 10 steps. Knows
nothing of dtlaunch; runs STEPS steps (default: long enough to be interrupted)."""
import datetime
import sys
import time

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=600))
rank, world = dist.get_rank(), dist.get_world_size()
grad = torch.ones(4096)
for step in range(1, steps + 1):
    dist.all_reduce(grad)
    grad.div_(world)
    time.sleep(0.02)  # the "forward and backward"
    if step % 10 == 0:
        print(f"step {step}", flush=True)
dist.destroy_process_group()
