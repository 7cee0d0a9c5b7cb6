#!/usr/bin/python3
"""Every Catch2 test case's name must survive ctest's discovery: CMake reads the discovered names
as a list, so a ';' in a name cuts it in two, and each half then matches no test case ("No test
cases matched", a failure seen only when the suite runs: stop 40's CI). Usage: test_names.py REPO"""
import pathlib
import re
import sys

repo = pathlib.Path(sys.argv[1])
bad = []
for path in sorted(repo.glob("tests/**/*.cpp")) + sorted(repo.glob("bench/**/*.cpp")):
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        for name in re.findall(r'TEST_CASE\("((?:[^"\\]|\\.)*)"', line):
            if ";" in name:
                bad.append(f"{path.relative_to(repo)}:{n}: ';' in the test name \"{name}\"")
print("\n".join(bad) if bad else "every test case name is free of ';'")
sys.exit(1 if bad else 0)
