# An unmodified-style torch.distributed client: everything comes from the environment the
# launcher exported (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), as with torchrun.
import datetime
import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=datetime.timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
assert rank == int(os.environ["RANK"]), (rank, os.environ["RANK"])
assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
expected = world * (world + 1) / 2
assert t.item() == expected, (t.item(), expected)
print(f"rank {rank} of {world} local {os.environ['LOCAL_RANK']}: sum {t.item():g} ok", flush=True)
dist.barrier()
dist.destroy_process_group()
