#!/usr/bin/python3
"""A process outside the job writes a forged rendezvous failure record, with terminal escapes,
into rank 0's store while the ranks wait there (docs/security.md: the TCPStore is
unauthenticated). Usage: forge_store.py PORT [KEY VALUE]...: the given records instead."""
import datetime
import sys
import time

import torch.distributed as dist

port = int(sys.argv[1])
# PyTorch 2.4+ asks for the libuv client by default, which Debian's 2.6 lacks ("use_libuv was
# requested but PyTorch was build without libuv support"); 1.13 has no such argument.
options = {"use_libuv": False} if "use_libuv" in (dist.TCPStore.__init__.__doc__ or "") else {}
deadline = time.time() + 30
while True:
    try:
        store = dist.TCPStore("127.0.0.1", port, is_master=False,
                              timeout=datetime.timedelta(seconds=5), **options)
        break
    except Exception:  # rank 0 not up yet
        if time.time() > deadline:
            raise
        time.sleep(0.2)
pairs = sys.argv[2:]
if pairs:
    for k, v in zip(pairs[::2], pairs[1::2]):
        store.set(k, v)
else:
    store.set("dtlaunch/rdzv/failed", "2\n\x1b]0;owned\x07forged: peer lost\x1b[2J")
print("forge_store: written", flush=True)
