#!/usr/bin/env python3
"""The layering rule of lib/ and apps/, checked on their #include lines, and the namespace rule
of lib/, checked on their namespace blocks.

A module may include its own headers and those of modules on lower layers, never one on its own
layer or above: a lower layer stays usable (and testable) without the ones above it, and there
can be no include cycle between modules.

A file under lib/MODULE/ declares its names in namespace dtlaunch::MODULE (or one nested in it),
so that a name says which module it comes from wherever it is used. The one exception is a
block that only forward-declares classes of a module it may include
(`namespace dtlaunch::heartbeat { class Listener; }`).

Usage: layering.py SOURCE_DIR. Prints one line per upward include ("FILE:LINE: MODULE (layer N)
includes OTHER (layer M)") and per namespace outside the file's module ("FILE:LINE: MODULE opens
namespace NAME") and exits 1, or prints how many includes and namespaces it read and exits 0.
"""
import pathlib
import re
import sys

# Lowest first. Each layer may include only the layers before it.
LAYERS = [
    ["core"],  # errors, the environment snapshot, parsing, text: the standard library only
    # values and pure algorithms over core; flight: the flight record, which ddp writes and trace
    # reads
    ["contract", "hostlist", "affinity", "heartbeat", "flight"],
    ["launch", "proc", "ddp"],  # the plan, the processes, the runtime
    ["doctor", "trace", "job", "watch"],  # the logic of the dtlaunch commands beyond launching
    ["cli"],  # what each command does: dispatch and rendering
    ["apps"],  # the programs: parse the command line, call lib/
]
LAYER_OF = {module: n for n, modules in enumerate(LAYERS) for module in modules}
# Include prefixes that name a module by another name: the runtime's public headers.
ALIASES = {"dtlaunch": "ddp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"/]+)/')
SOURCES = (".cpp", ".hpp", ".h", ".cc")

# Comments and string and character literals, whose braces and words are not code. Digit
# separators (1'000) are removed first, so that they do not read as character literals.
DIGIT_SEPARATOR = re.compile(r"(?<=[0-9a-fA-F])'(?=[0-9a-fA-F])")
NOT_CODE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
# A block that only forward-declares: `namespace dtlaunch::heartbeat { class Listener; }`.
FORWARD_ONLY = re.compile(r"\bnamespace\s+([\w:]+)\s*\{(?:\s*(?:class|struct)\s+\w+\s*;)+\s*\}")
# A namespace opening (named or anonymous), or any other brace.
BRACE = re.compile(r"\b(?:inline\s+)?namespace\s*([\w:]*)\s*\{|[{}]")


def module_of(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root).parts
    return "apps" if parts[0] == "apps" else parts[1]


def may_include(module: str, other: str) -> bool:
    return other == module or (other in LAYER_OF and LAYER_OF[other] < LAYER_OF[module])


def spaces(text: str) -> str:
    """text with every character but its newlines made a space, so that line numbers stay."""
    return re.sub(r"[^\n]", " ", text)


def namespace_violations(text: str, module: str):
    """How many namespaces the file opens, and (line, name) of each outside dtlaunch::module."""
    code = NOT_CODE.sub(lambda m: spaces(m.group(0)), DIGIT_SEPARATOR.sub("", text))

    def allowed_forward(block: re.Match) -> str:
        owner = block.group(1).split("::")
        allowed = owner[0] == "dtlaunch" and len(owner) > 1 and may_include(module, owner[1])
        return spaces(block.group(0)) if allowed else block.group(0)

    code = FORWARD_ONLY.sub(allowed_forward, code)
    opened = 0
    found = []
    scopes = []  # per open brace: the namespace names it adds ([] for any other brace)
    for brace in BRACE.finditer(code):
        if brace.group(0) == "}":
            if scopes:
                scopes.pop()
            continue
        if brace.group(0) == "{":
            scopes.append([])
            continue
        opened += 1
        scopes.append(brace.group(1).split("::") if brace.group(1) else ["(anonymous)"])
        name = [part for scope in scopes for part in scope]
        if name[:2] != ["dtlaunch", module]:
            found.append((code.count("\n", 0, brace.start()) + 1, "::".join(name)))
    return opened, found


def violations(root: pathlib.Path):
    read = 0
    opened = 0
    found = []
    files = [p for top in ("lib", "apps") for p in sorted((root / top).rglob("*"))
             if p.suffix in SOURCES and p.is_file()]
    for path in files:
        module = module_of(path, root)
        if module not in LAYER_OF:
            found.append(f"{path.relative_to(root)}: module {module!r} has no layer in {__file__}")
            continue
        text = path.read_text(errors="replace")
        if module != "apps":
            count, outside = namespace_violations(text, module)
            opened += count
            found += [f"{path.relative_to(root)}:{number}: {module} opens namespace {name}"
                      for number, name in outside]
        for number, line in enumerate(text.splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            other = ALIASES.get(match.group(1), match.group(1))
            if other not in LAYER_OF:
                continue  # a system or third-party header ("torch/...", "c10/...")
            read += 1
            if not may_include(module, other):
                found.append(f"{path.relative_to(root)}:{number}: {module} (layer "
                             f"{LAYER_OF[module]}) includes {other} (layer {LAYER_OF[other]})")
    return read, opened, found


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: layering.py SOURCE_DIR", file=sys.stderr)
        return 2
    root = pathlib.Path(sys.argv[1]).resolve()
    read, opened, found = violations(root)
    for line in found:
        print(line)
    if found:
        return 1
    if read == 0 or opened == 0:
        print(f"no module includes or namespaces found under {root}: wrong SOURCE_DIR?")
        return 1
    print(f"{read} module includes read, none upward; {opened} namespaces opened in lib/, "
          "each in its file's module")
    return 0


if __name__ == "__main__":
    sys.exit(main())
