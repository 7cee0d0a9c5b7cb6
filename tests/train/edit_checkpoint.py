#!/usr/bin/python3
"""Rewrites one field of a dtlaunch-train checkpoint's progress record and seals it again with a
valid CRC-32, so that the range checks behind the checksum can be tested:
    edit_checkpoint.py IN OUT FIELD VALUE
FIELD: 0 version, 1 epoch, 2 step_in_epoch, 3 global_step, 4 world_size, 5 batch_size, 6 seed.
The payload is LibTorch's archive, which torch.jit reads and writes (docs/example.md)."""
import io
import sys
import zlib

import torch

src, dst, field, value = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = open(src, "rb").read()
eol = data.index(b"\n")
module = torch.jit.load(io.BytesIO(data[eol + 1:]))
getattr(module, "dtlaunch_train_progress")[field] = value
out = io.BytesIO()
torch.jit.save(module, out)
payload = out.getvalue()
header = "dtlaunch-train checkpoint 2 size %d crc32 %08x\n" % (len(payload), zlib.crc32(payload))
open(dst, "wb").write(header.encode() + payload)
