#!/usr/bin/python3
"""PyTorch's side of bench/ddp/hier.sh: one float32 all_reduce on ProcessGroupGloo, back to
back, timed as bench/ddp/allreduce_latency.cpp times ours.

usage: torch_allreduce.py NUMEL REPS WARMUP, one process per rank, configured like any
torch.distributed program (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: dtlaunch exports them).
Rank 0 prints "allreduce: numel N reps R torch median_us M p10_us A p90_us B".
"""
import sys
import time

import torch
import torch.distributed as dist


def main():
    numel, reps, warmup = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    t = torch.ones(numel)
    us = []
    for i in range(warmup + reps):
        start = time.perf_counter()
        dist.all_reduce(t)
        end = time.perf_counter()
        if i >= warmup:
            us.append((end - start) * 1e6)
        t.fill_(1.0)
    us.sort()

    def at(q):
        return us[int(q * (len(us) - 1))]

    if dist.get_rank() == 0:
        print(f"allreduce: numel {numel} reps {reps} torch median_us {at(0.5):.1f} "
              f"p10_us {at(0.1):.1f} p90_us {at(0.9):.1f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
