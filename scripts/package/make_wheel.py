#!/usr/bin/env python3
"""Writes dtlaunch's wheel: the launcher as a script of the wheel's data, so that `pip install`
puts it on a venv's (or ~/.local's) PATH. No Python code, no dependency. The platform tag says
the binary's real glibc floor (manylinux_2_28: checked by scripts/package.sh before this runs),
so pip refuses it on an older system instead of installing a binary that cannot start.

Reproducible: entries in a fixed order with the commit's time, as scripts/package.sh packs the
tarball and the .deb.
"""
import argparse
import base64
import hashlib
import os
import time
import zipfile


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--glibc", required=True, help="the binary's glibc floor, e.g. 2.28")
    parser.add_argument("--binary", required=True)
    parser.add_argument("--readme", required=True)
    parser.add_argument("--mtime", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    major, minor = args.glibc.split(".")
    tag = f"py3-none-manylinux_{major}_{minor}_x86_64"
    dist_info = f"dtlaunch-{args.version}.dist-info"
    with open(args.readme, encoding="utf-8") as f:
        readme = f.read()
    metadata = (
        "Metadata-Version: 2.1\n"
        "Name: dtlaunch\n"
        f"Version: {args.version}\n"
        "Summary: Slurm-aware launcher for distributed PyTorch and LibTorch training "
        "(one static binary)\n"
        "License: see the project's repository\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: C++\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )
    wheel = (
        "Wheel-Version: 1.0\n"
        "Generator: dtlaunch scripts/package/make_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    )
    with open(args.binary, "rb") as f:
        binary = f.read()
    # (path in the wheel, bytes, executable)
    entries = [
        (f"dtlaunch-{args.version}.data/scripts/dtlaunch", binary, True),
        (f"{dist_info}/METADATA", metadata.encode(), False),
        (f"{dist_info}/WHEEL", wheel.encode(), False),
    ]
    record_path = f"{dist_info}/RECORD"
    record = "\n".join([record_line(p, d) for p, d, _ in entries] + [f"{record_path},,", ""])
    entries.append((record_path, record.encode(), False))

    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, f"dtlaunch-{args.version}-{tag}.whl")
    stamp = time.gmtime(max(args.mtime, 315532800))[:6]  # zip cannot say before 1980
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as whl:
        for path, data, executable in entries:
            info = zipfile.ZipInfo(path, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            # pip gives an installed script the executable bit when its entry has it.
            info.external_attr = (0o100755 if executable else 0o100644) << 16
            whl.writestr(info, data)
    print(f"package: {out}")


if __name__ == "__main__":
    main()
