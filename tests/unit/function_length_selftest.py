#!/usr/bin/env python3
"""function_length.py's own cases: what it counts as a function or a class body, and, where
Universal Ctags is installed, that its class lengths over 20 lines agree with ctags's line and
end fields on lib/ and apps/ (issue 36 asks for ctags's measure; the check itself reads text, so
that it needs nothing but Python).

Usage: function_length_selftest.py SOURCE_DIR. Exits 1 with a line per disagreement.
"""
import pathlib
import shutil
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import function_length as fl  # noqa: E402

# (source text, the (first line, line count, kind) bodies it must yield)
CASES = [
    ("class A {\n int x;\n};\n", [(1, 3, "class")]),
    ("struct B final : public A, private C<int> {\n};\n", [(1, 2, "class")]),
    ("class DTLAUNCH_DDP_API Group {\n public:\n  void f() {\n  }\n};\n",
     [(3, 2, "function"), (1, 5, "class")]),
    ("template <class T>\nstruct Number<std::optional<T>> {\n  using type = T;\n};\n",
     [(2, 3, "class")]),
    ("enum class Reason {\n  kA,\n  kB,\n};\n", []),
    ("void f() {\n  struct sigaction sa {};\n}\n", [(1, 3, "function")]),
    ("namespace n {\nstruct S {\n  int g(int a) const {\n    return a;\n  }\n};\n}\n",
     [(3, 3, "function"), (2, 5, "class")]),
    ("int h() {\n  if (x) {\n  }\n  return [&] {\n    return 1;\n  }();\n}\n",
     [(4, 3, "function"), (1, 7, "function")]),
]


def ctags_classes(root: pathlib.Path):
    """{(file, line): length} of ctags's classes and structs, or None without Universal Ctags."""
    ctags = shutil.which("ctags")
    if not ctags or "Universal" not in subprocess.run([ctags, "--version"], capture_output=True,
                                                      text=True).stdout:
        return None
    out = subprocess.run([ctags, "-R", "--languages=C++", "--kinds-C++=cs", "--fields=+ne",
                          "-f", "-", "lib", "apps"], cwd=root, capture_output=True,
                         text=True, check=True).stdout
    found = {}
    for row in out.splitlines():
        fields = row.split("\t")
        extra = dict(f.split(":", 1) for f in fields[3:] if ":" in f)
        if "end" in extra:
            found[(fields[1], int(extra["line"]))] = int(extra["end"]) - int(extra["line"]) + 1
    return found


def main() -> int:
    root = pathlib.Path(sys.argv[1]).resolve()
    problems = []
    for text, want in CASES:
        got = fl.bodies(text)
        if sorted(got) != sorted(want):
            problems.append(f"{text!r}: got {got}, want {want}")
    theirs = ctags_classes(root)
    if theirs is None:
        print("Universal Ctags not installed: the cross-check with ctags is not run")
    else:
        ours = {}
        for path in (p for top in ("lib", "apps") for p in (root / top).rglob("*")
                     if p.suffix in fl.SOURCES and p.is_file()):
            for line, count, kind in fl.bodies(path.read_text(errors="replace")):
                if kind == "class":
                    ours[(str(path.relative_to(root)), line)] = count
        disagreements = [f"{key[0]}:{key[1]}: class of {ours.get(key)} lines here, "
                         f"{theirs.get(key)} by ctags" for key in sorted(set(ours) | set(theirs))
                         if max(ours.get(key, 0), theirs.get(key, 0)) > 20 and
                         ours.get(key) != theirs.get(key)]
        problems += disagreements
        if not disagreements:
            print(f"{len(ours)} classes read; those over 20 lines agree with ctags")
    print("\n".join(problems) if problems else f"{len(CASES)} cases passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
