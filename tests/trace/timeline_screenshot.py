#!/usr/bin/env python3
"""The timeline page of `dtlaunch trace --html`, rendered by headless Chromium and checked by its
pixels: a 4-rank job where rank 3 enters every step 20 ms late and rank 1 left no file. Rank 3's
marker must be the straggler's red, rank 1's the missing grey, ranks 0 and 2 unmarked.

Also the command line's exit statuses (66 for an empty directory, 2 for bad input).
Usage: timeline_screenshot.py DTLAUNCH [PNG_TO_KEEP]. Exit 77 (ctest's skip) only when no
chromium is installed."""
import json, os, random, shutil, struct, subprocess, sys, tempfile, zlib

STRAGGLER_RED = (0xE0, 0x00, 0x00)
MISSING_GREY = (0x80, 0x80, 0x80)


def rank_file(rank, world, entries):
    head = {"format": "dtlaunch-flight-record", "version": 2, "run_id": "shot", "attempt": 0,
            "rank": rank, "world_size": world, "local_rank": rank, "host": "node%02d" % rank,
            "kind": "exit", "reason": "exit", "dumped_at_us": 2_000_000_000_000_000,
            "clock_offset_us": 0, "clock_error_us": 30, "collectives_started": len(entries),
            "entries_capacity": 2000}
    text = json.dumps(head)[:-1] + ',\n "entries": ['
    rows = []
    for seq, enq, end in entries:
        rows.append('  {"seq": %d, "op": "all_reduce", "dtype": "float32", "numel": 1000, '
                    '"shape": [1000], "root": -1, "enqueue_us": %d, "start_us": %d, '
                    '"end_us": %d, "state": "completed"}' % (seq, enq, enq, end))
    return text + "\n" + ",\n".join(rows) + "\n ]}\n"


def write_job(directory):
    rng = random.Random(5)
    world, per = 4, {r: [] for r in range(4)}
    t = 1_000_000_000_000_000
    for seq in range(1, 121):
        enq = {r: t + rng.randint(0, 800) + (20_000 if r == 3 and seq % 3 == 1 else 0)
               for r in range(world)}
        last = max(enq.values())
        for r in range(world):
            per[r].append((seq, enq[r], last + 400))
        t = last + 2_000
    for r in (0, 2, 3):  # rank 1: no file
        with open(os.path.join(directory, "shot.a0.rank-%d.json" % r), "w") as f:
            f.write(rank_file(r, world, per[r]))


def read_png(path):
    """RGB rows of an 8-bit RGB or RGBA PNG (what Chromium writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), "unexpected PNG format"
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1: line[i] = (line[i] + a) & 0xFF
            elif f == 2: line[i] = (line[i] + b) & 0xFF
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append([tuple(line[x * channels:x * channels + 3]) for x in range(width)])
        prev = line
    return rows


def main():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("SKIP: no chromium installed")
        return 77
    dtlaunch = sys.argv[1]
    # The command line's statuses first: an empty directory 66 with one line, not a directory 2,
    # a bad --format 2.
    with tempfile.TemporaryDirectory() as empty:
        for argv, status, line in (
                ([empty], 66, "dtlaunch trace: %s: no flight record (*.json) in it" % empty),
                ([empty + "/nope"], 2, "dtlaunch: trace: %s/nope is not a directory" % empty),
                ([empty, "--format", "xml"], 2, "dtlaunch: ")):
            run = subprocess.run([dtlaunch, "trace"] + argv, capture_output=True, text=True)
            assert run.returncode == status, "%s: status %d, not %d" % (argv, run.returncode, status)
            assert run.stderr.startswith(line) and run.stderr.count("\n") == 1, run.stderr
    with tempfile.TemporaryDirectory() as tmp:
        traces = os.path.join(tmp, "traces")
        os.mkdir(traces)
        write_job(traces)
        page, png = os.path.join(tmp, "timeline.html"), os.path.join(tmp, "timeline.png")
        run = subprocess.run([dtlaunch, "trace", traces, "--html", page],
                             capture_output=True, text=True)
        print(run.stdout + run.stderr)
        assert run.returncode == 3, "dtlaunch trace exited %d, not 3" % run.returncode
        assert "straggler: rank 3 (node03" in run.stdout
        assert "missing: rank 1 " in run.stdout
        html = open(page).read()
        top = int(html.split('data-top="')[1].split('"')[0])
        row = int(html.split('data-row="')[1].split('"')[0])
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", "--window-size=1240,%d" % (top + 4 * row + 200),
                        "--screenshot=" + png, "file://" + page],
                       check=True, capture_output=True, timeout=120)
        pixels = read_png(png)
        def marker(rank):
            return pixels[top + rank * row + row // 2][4]
        print("markers:", [marker(r) for r in range(4)])
        assert marker(3) == STRAGGLER_RED, "rank 3's marker is %s" % (marker(3),)
        assert marker(1) == MISSING_GREY, "rank 1's marker is %s" % (marker(1),)
        for r in (0, 2):
            assert marker(r) not in (STRAGGLER_RED, MISSING_GREY), "rank %d is marked" % r
        # The straggler's track is drawn: its row holds the collectives' bars (blue) too.
        y = top + 3 * row + row // 2
        assert any(p == (0x3B, 0x7D, 0xD8) for p in pixels[y]), "rank 3's track has no bars"
        if len(sys.argv) > 2:
            shutil.copy(png, sys.argv[2])
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
