#!/usr/bin/python3
"""The real PyTorch as dtlaunch's client, unmodified: env:// rendezvous, one gloo all-reduce of
the ranks, a check of the sum. Writes OUT/torch.rank<R>.json for the driver."""
import datetime
import json
import os
import socket
import sys

import torch
import torch.distributed as dist

out = sys.argv[1]
dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank)])
dist.all_reduce(t)
hosts = [None] * world
dist.all_gather_object(hosts, socket.gethostname())
want = world * (world - 1) / 2
result = {"rank": rank, "world": world, "sum": t.item(), "want": want, "hosts": hosts,
          "host": socket.gethostname(), "master": os.environ["MASTER_ADDR"],
          "port": os.environ["MASTER_PORT"], "local_rank": int(os.environ["LOCAL_RANK"])}
with open(os.path.join(out, f"torch.rank{rank}.json"), "w") as f:
    json.dump(result, f)
dist.destroy_process_group()
sys.exit(0 if t.item() == want else 1)
