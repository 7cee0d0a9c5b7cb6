#!/usr/bin/python3
"""The PyTorch side of bench/ddp/run.sh: dtlaunch-train's benchmark mode, step for step, with
torch.nn.parallel.DistributedDataParallel on Gloo.

One process per rank, configured like any torch.distributed program through RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT. Same model (apps/train/model.hpp), same synthetic data recipe, same
batch, same SGD and the same timed region as `dtlaunch-train --synthetic N`. Prints, on rank 0:
  timing: steps S ms/step X
and with --phases, the step phase by phase as bench/ddp/ddp_phases.cpp splits ours (a clock read
between the phases), with DDP's own comm and overlap times per step (its runtime statistics,
collected every iteration, warm-up included):
  phases: data_ms .. zero_ms .. forward_ms .. backward_ms .. step_ms .. item_ms .. comm_ms ..
          overlap_ms .. buckets N gloo_threads T loss L
"""
import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class FashionCnn(nn.Module):
    """apps/train/model.hpp in Python; keep the two in step."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--synthetic", type=int, required=True, help="random samples per rank")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--max-steps", type=int, required=True)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=0.03)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--first-bucket-default", action="store_true",
                   help="keep PyTorch's separate 1 MiB first bucket instead of --bucket-cap-mb")
    p.add_argument("--phases", action="store_true", help="time each phase of the step")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: model and data on the GPU, NCCL, a device sync at each clock read")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    gpu = a.device == "cuda"
    dist.init_process_group("nccl" if gpu else "gloo")
    rank = dist.get_rank()
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")

    # Same recipe as make_synthetic() in apps/train/trainer.cpp.
    g = torch.Generator()
    g.manual_seed(a.seed + rank)
    images = torch.randn((a.synthetic, 1, 28, 28), generator=g)
    labels = torch.randint(10, (a.synthetic,), generator=g)
    images, labels = images.to(dev), labels.to(dev)

    torch.manual_seed(a.seed)
    if not a.first_bucket_default:
        # PyTorch gives the last layers' gradients (ready first) a bucket of their own of
        # _DEFAULT_FIRST_BUCKET_BYTES (1 MiB); our runtime has one cap for all buckets.
        dist._DEFAULT_FIRST_BUCKET_BYTES = int(a.bucket_cap_mb * 1024 * 1024)
    model = nn.parallel.DistributedDataParallel(FashionCnn().to(dev),
                                                bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    if a.phases:
        model._set_ddp_runtime_logging_sample_rate(1)
    def clock():
        if gpu:
            torch.cuda.synchronize()
        return time.perf_counter()

    phase = [0.0] * 6  # data, zero, forward, backward, step, item

    n, bs = a.synthetic, a.batch_size
    steps_per_epoch = (n + bs - 1) // bs
    order = torch.arange(n, device=dev)
    loss_sum = 0.0
    t0 = None
    for step in range(a.max_steps):
        if step == a.warmup_steps:
            t0 = clock()
            phase = [0.0] * 6
        if a.phases:
            t = [clock()]
            first = (step % steps_per_epoch) * bs
            idx = order[first:min(first + bs, n)]
            x, y = images.index_select(0, idx), labels.index_select(0, idx)
            t.append(clock())
            opt.zero_grad()
            t.append(clock())
            loss = F.cross_entropy(model(x), y)
            t.append(clock())
            loss.backward()
            t.append(clock())
            opt.step()
            t.append(clock())
            loss_sum += loss.item()
            t.append(clock())
            for k in range(6):
                phase[k] += t[k + 1] - t[k]
            continue
        first = (step % steps_per_epoch) * bs
        idx = order[first:min(first + bs, n)]
        x, y = images.index_select(0, idx), labels.index_select(0, idx)
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss_sum += loss.item()
    if rank == 0 and t0 is not None and a.max_steps > a.warmup_steps:
        steps = a.max_steps - a.warmup_steps
        ms = 1e3 * (clock() - t0) / steps
        print(f"timing: steps {steps} ms/step {ms:.3f}", flush=True)
        if a.phases:
            d = model._get_ddp_logging_data()
            f = [f"{1e3 * v / steps:.3f}" for v in phase]
            print(f"phases: data_ms {f[0]} zero_ms {f[1]} forward_ms {f[2]} backward_ms {f[3]} "
                  f"step_ms {f[4]} item_ms {f[5]} "
                  f"comm_ms {d.get('avg_backward_comm_time', 0) / 1e6:.3f} "
                  f"overlap_ms {d.get('avg_backward_compute_comm_overlap_time', 0) / 1e6:.3f} "
                  f"buckets {len(str(d.get('bucket_sizes', '')).split(', '))} "
                  f"gloo_threads {d.get('gloo_num_threads', '?')} "
                  f"loss {loss_sum / a.max_steps:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
