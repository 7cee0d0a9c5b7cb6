"""Where a node's link sits idle during a run: samples this network namespace's eth0 tx_bytes every
2 ms until SIGTERM, then prints one line: the idle gaps of 8 ms or more between the first and the
last byte sent after srun's launch traffic (the last pause of a second or more), their median, and
the rate while the link carried data. In an all_reduce loop there is about one gap per call: the
link waiting for the next call's first part.

bench/ddp/hier.sh runs it on node 1 with LINK_GAPS=1 (docs/benchmarks.md, "The same VM, a later
session"); alone: ip netns exec NODE python3 link_gaps.py [IFACE]
"""

import signal
import statistics
import sys
import time

SAMPLE_S = 0.002
MIN_GAP_S = 0.008
START_UP_S = 1.0  # a longer pause is srun's launch traffic before the program's first collective
ACTIVE_BYTES = 20000  # more than a sample's worth of heartbeats and acknowledgements


def main():
    iface = sys.argv[1] if len(sys.argv) > 1 else "eth0"
    try:
        counter = open(f"/sys/class/net/{iface}/statistics/tx_bytes")
    except OSError as e:
        sys.exit(f"link_gaps: interface '{iface}': {e.strerror}")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    samples = []
    while not stop:
        counter.seek(0)
        samples.append((time.monotonic(), int(counter.read())))
        time.sleep(SAMPLE_S)
    active = [(t, b) for (t, b), (_, prev) in zip(samples[1:], samples) if b - prev > ACTIVE_BYTES]
    for i in range(len(active) - 1, 0, -1):
        if active[i][0] - active[i - 1][0] >= START_UP_S:
            active = active[i:]
            break
    if len(active) < 2:
        print("link_gaps: no traffic")
        return
    gaps = [t - prev_t for (t, _), (prev_t, _) in zip(active[1:], active) if t - prev_t >= MIN_GAP_S]
    busy = active[-1][0] - active[0][0] - sum(gaps)
    if busy <= 0:  # every interval between active samples was a gap: no stream to rate
        print(f"link_gaps: no sustained traffic ({len(active)} active samples)")
        return
    sent = active[-1][1] - active[0][1]
    median = statistics.median(gaps) * 1000 if gaps else 0.0
    print(f"link_gaps: {len(gaps)} gaps of {MIN_GAP_S * 1000:.0f} ms or more, median {median:.1f} ms, "
          f"{sum(gaps) * 1000:.0f} ms idle in {(busy + sum(gaps)) * 1000:.0f} ms; "
          f"{sent / busy / 1e6:.1f} MB/s while busy")


if __name__ == "__main__":
    main()
