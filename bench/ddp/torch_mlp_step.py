#!/usr/bin/python3
"""PyTorch's side of bench/ddp/mlp_step.cpp: the same 25 M-parameter MLP, data and SGD under
torch.nn.parallel.DistributedDataParallel on Gloo.

usage: torch_mlp_step.py STEPS WARMUP [BATCH=16] [--bucket-view], one process per rank (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT). --bucket-view: DistributedDataParallel's
gradient_as_bucket_view=True (default False). Rank 0 prints
"mlp-step: params P ms_per_step X torch".
"""
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(1024, 4096)
        self.hidden = nn.Linear(4096, 4096)
        self.out = nn.Linear(4096, 1024)

    def forward(self, x):
        return self.out(F.relu(self.hidden(F.relu(self.inp(x)))))


def main():
    steps, warmup = int(sys.argv[1]), int(sys.argv[2])
    batch = int(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("-") else 16
    bucket_view = sys.argv[-1] == "--bucket-view"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    torch.manual_seed(1)
    net = Mlp()
    model = nn.parallel.DistributedDataParallel(net, gradient_as_bucket_view=bucket_view)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(100 + dist.get_rank())
    x, y = torch.randn(batch, 1024), torch.randn(batch, 1024)
    t0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    dist.barrier()
    ms = (time.perf_counter() - t0) * 1e3 / steps
    if dist.get_rank() == 0:
        params = sum(p.numel() for p in net.parameters())
        print(f"mlp-step: params {params} ms_per_step {ms:.1f} torch", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
