#!/usr/bin/python3
"""A process outside the job, on the same node (docs/security.md): finds the ranks whose
environment holds MARKER (readable: same user), waits until each listens, and sends to every port
each rank listens on (the heartbeat's; rank 0's store; the backend's while it listens):
  (a) issue 35's 32-byte verdict frame "rank 2 exited, seen by 0", with no hello (twice: 64 bytes);
  (b) a hello and a verdict sealed with another job's key, as captured from another job;
  (c) the same verdict trickled one byte every 0.3 s.
Usage: forger.py MARKER WORLD"""
import hashlib
import hmac
import os
import socket
import struct
import sys
import threading
import time

MARKER, WORLD = sys.argv[1].encode(), int(sys.argv[2])


def ranks():
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if MARKER not in env:
            continue
        var = dict(x.split(b"=", 1) for x in env if b"=" in x)
        if b"RANK" in var:
            found[int(pid)] = int(var[b"RANK"])
    return found


def address(hexaddr):
    raw = bytes.fromhex(hexaddr)
    if len(raw) == 4:
        text = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
        text = socket.inet_ntop(socket.AF_INET6, raw)
        if text.startswith("::ffff:"):
            text = text[7:]
    return "127.0.0.1" if text in ("0.0.0.0", "::") else text


def listening(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        return []
    ports = []
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):  # the rank's namespace
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:
                host, port = f[1].split(":")
                ports.append((address(host), int(port, 16)))
    return ports


def old_verdict():
    return bytes([0xB7, 3, 1, 0]) + struct.pack("<III", 2, 0, 12345) + bytes(16)


def sealed(key, kind, receiver, seq):
    f = bytearray(64)
    f[0], f[1], f[2] = 0xB8, kind, 1 if kind == 3 else 0
    struct.pack_into("<III", f, 4, 0 if kind == 1 else 2, 0, 12345)
    struct.pack_into("<IQ", f, 32, 0, seq)
    mac = hmac.new(key, bytes(f[:48]) + struct.pack("<I", receiver) + b"\x01", hashlib.sha256)
    f[48:] = mac.digest()[:16]
    return bytes(f)


def connect(host, port):
    s = socket.create_connection((host, port), timeout=2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def trickle(host, port, log):
    try:
        s = connect(host, port)
        for i, byte in enumerate(old_verdict() * 2):
            s.send(bytes([byte]))
            time.sleep(0.3)
            if i > 20:
                break
    except OSError as e:
        log.append(f"trickle to {port} cut: {e}")


def main():
    deadline = time.time() + 60
    while time.time() < deadline:
        found = ranks()
        if len(found) == WORLD and all(listening(p) for p in found):
            break
        time.sleep(0.1)
    else:
        sys.exit(f"forger: found {ranks()} before the deadline")
    time.sleep(2.0)  # the rendezvous and the backend's connections are done
    other_key = os.urandom(32)
    held, threads, log, sent = [], [], [], 0
    for pid, rank in ranks().items():
        for host, port in listening(pid):
            try:
                a = connect(host, port)
                a.sendall(old_verdict() * 2)
                b = connect(host, port)
                seq = time.time_ns()
                b.sendall(sealed(other_key, 1, rank, seq) + sealed(other_key, 3, rank, seq + 1))
                held += [a, b]
                sent += 1
            except OSError as e:
                log.append(f"rank {rank} port {port}: {e}")
            t = threading.Thread(target=trickle, args=(host, port, log))
            t.start()
            threads.append(t)
    for t in threads:
        t.join()
    print(f"forger: sent to {sent} port(s) of {WORLD} ranks; " + "; ".join(log), flush=True)


main()
