#!/usr/bin/env python3
"""The layering rule of lib/ and apps/, checked on their #include lines.

A module may include its own headers and those of modules on lower layers, never one on its own
layer or above: a lower layer stays usable (and testable) without the ones above it, and there
can be no include cycle between modules.

Usage: layering.py SOURCE_DIR. Prints one line per upward include ("FILE:LINE: MODULE (layer N)
includes OTHER (layer M)") and exits 1, or prints how many includes it read and exits 0.
"""
import pathlib
import re
import sys

# Lowest first. Each layer may include only the layers before it.
LAYERS = [
    ["core"],  # errors, the environment snapshot, parsing, text: the standard library only
    ["contract", "hostlist", "affinity", "heartbeat"],  # values and pure algorithms over core
    ["launch", "proc", "ddp"],  # the plan, the processes, the runtime
    ["doctor", "trace", "job"],  # the logic of the dtlaunch commands beyond launching
    ["cli"],  # what each command does: dispatch and rendering
    ["apps"],  # the programs: parse the command line, call lib/
]
LAYER_OF = {module: n for n, modules in enumerate(LAYERS) for module in modules}
# Include prefixes that name a module by another name: the runtime's public headers.
ALIASES = {"dtlaunch": "ddp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/')
SOURCES = (".cpp", ".hpp", ".h", ".cc")


def module_of(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root).parts
    return "apps" if parts[0] == "apps" else parts[1]


def violations(root: pathlib.Path):
    read = 0
    found = []
    files = [p for top in ("lib", "apps") for p in sorted((root / top).rglob("*"))
             if p.suffix in SOURCES and p.is_file()]
    for path in files:
        module = module_of(path, root)
        if module not in LAYER_OF:
            found.append(f"{path.relative_to(root)}: module {module!r} has no layer in {__file__}")
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            other = ALIASES.get(match.group(1), match.group(1))
            if other not in LAYER_OF:
                continue  # a system or third-party header ("torch/...", "c10/...")
            read += 1
            if other != module and LAYER_OF[other] >= LAYER_OF[module]:
                found.append(f"{path.relative_to(root)}:{number}: {module} (layer "
                             f"{LAYER_OF[module]}) includes {other} (layer {LAYER_OF[other]})")
    return read, found


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: layering.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    read, found = violations(root)
    for line in found:
        print(line)
    if found:
        return 1
    if read == 0:
        print(f"no module includes found under {root}: wrong SOURCE_DIR?")
        return 1
    print(f"{read} module includes read, none upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
