#!/usr/bin/env python3
"""docs/architecture.md names every module of lib/ in its module table (a row "| N | MODULE |").

Usage: architecture_doc.py SOURCE_DIR. Prints the modules missing from the page and exits 1, or
how many it found and exits 0.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1]).resolve()
page = (root / "docs" / "architecture.md").read_text()
named = set(re.findall(r"(?m)^\| \d+ \| (\w+) \|", page))
modules = sorted(p.name for p in (root / "lib").iterdir() if (p / "CMakeLists.txt").is_file())
missing = [m for m in modules if m not in named]
if not modules:
    print(f"no modules under {root / 'lib'}: wrong SOURCE_DIR?")
    sys.exit(1)
print(f"docs/architecture.md does not name: {', '.join(missing)}" if missing else
      f"docs/architecture.md names all {len(modules)} modules of lib/")
sys.exit(1 if missing else 0)
