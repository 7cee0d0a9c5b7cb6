"""PyTorch's own DistributedSampler, the reference for dtlaunch's C++ one.

Reads cases, one a line: "dataset_size num_replicas rank shuffle seed epoch drop_last"
(booleans as 0/1), and prints each case's indices on one line, space-separated.
Usage: /usr/bin/python3 sampler_reference.py CASES_FILE
"""
import sys

from torch.utils.data.distributed import DistributedSampler


class Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def main(path):
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            n, replicas, rank, shuffle, seed, epoch, drop_last = (int(x) for x in line.split())
            s = DistributedSampler(Sized(n), num_replicas=replicas, rank=rank,
                                   shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
            s.set_epoch(epoch)
            indices = list(iter(s))
            assert len(indices) == len(s)
            print(" ".join(str(i) for i in indices))


if __name__ == "__main__":
    main(sys.argv[1])
