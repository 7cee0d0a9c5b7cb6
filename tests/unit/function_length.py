#!/usr/bin/env python3
"""No function of lib/ or apps/ is over 80 lines, no class or struct over 300, and no source
file of lib/ over 800, checked on their source text.

A function that long holds several steps in one piece; it is cut into named steps instead
(issue 25). A function's length counts its lines from the one that names it (where its
parameter list opens) to the one that closes its body, both included, as ctags's line and end
fields do; a lambda counts in the function around it and on its own.

A class's or struct's length counts from the line of its key word to the one that closes its
body, as ctags's line and end fields do for kinds c and s (member functions defined outside the
body do not count): a class that long does several jobs (issue 36).

Usage: function_length.py SOURCE_DIR. Prints one line per function or class over its limit
("FILE:LINE: N lines, over 80") and exits 1, or prints how many bodies it read and the longest,
and exits 0. It reads the text, not the grammar: a body is a '{' whose code before it (comments,
strings and qualifiers such as const, noexcept or "-> T" aside) ends with a ')' that closes
something other than if, for, while, switch or catch. A file whose braces do not pair up is
reported rather than guessed at.
"""
import argparse
import bisect
import pathlib
import re
import sys

LIMIT = 80
CLASS_LIMIT = 300
FILE_LIMIT = 800  # lines of a source file of lib/
# The head of a class or struct body (not an enum's): the key word, an export macro, the name,
# template arguments of a specialization, then "final" or base classes.
CLASS_HEAD = re.compile(r"(?:^|[;{}]|(?<!enum)\s)(class|struct)\s+(?:alignas\s*\([^)]*\)\s*)?"
                        r"(?:[A-Z][A-Z0-9_]*\s+)?"
                        r"[A-Za-z_]\w*(?:\s*<[^;{}]*>)?(?:\s+final)?(?:\s*:[^;{}()]*(?:<[^;{}]*>)?[^;{}()]*)?\s*$")
WINDOW = 4000  # characters before a brace that can belong to its signature
SOURCES = (".cpp", ".hpp", ".h", ".cc")
NOT_A_FUNCTION = {"if", "for", "while", "switch", "catch"}
QUALIFIERS = ("const", "noexcept", "override", "final", "mutable")


def blank_out(text: str) -> str:
    """The text with comments, string and character literals replaced by spaces (lines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
        elif text.startswith('R"', i) and not (i > 0 and (text[i - 1].isalnum() or
                                                         text[i - 1] == "_")):
            delimiter = text[i + 2:text.find("(", i)]
            end = text.find(")" + delimiter + '"', i)
            end = n if end < 0 else end + len(delimiter) + 2
        elif text[i] == '"' or (text[i] == "'" and not (i > 0 and text[i - 1].isalnum())):
            # A quote after a digit or letter is a digit separator (1'000), not a literal (a
            # prefixed character literal, u8'{', would be misread: lib/ and apps/ have none).
            quote, end = text[i], i + 1
            while end < n and text[end] != quote:
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            out.append(text[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", text[i:end]))
        i = end
    return "".join(out)


def matching_open(text: str, close: int, pair: str = "()") -> int:
    """Where the bracket that closes at `close` opens; -1 when it does not."""
    depth = 0
    for k in range(close, -1, -1):
        if text[k] == pair[1]:
            depth += 1
        elif text[k] == pair[0]:
            depth -= 1
            if depth == 0:
                return k
    return -1


def without_qualifiers(head: str) -> str:
    """`head` without the qualifiers that may stand between a parameter list and a body."""
    head = head.rstrip()
    while True:
        word = next((q for q in QUALIFIERS if head.endswith(q) and
                     not (len(head) > len(q) and (head[-len(q) - 1].isalnum() or
                                                  head[-len(q) - 1] == "_"))), None)
        if word is None:
            return head
        head = head[:-len(word)].rstrip()


def without_trailing_return(head: str) -> str:
    """`head` up to the ')' of a parameter list followed by "-> TYPE", or as it is."""
    arrow = len(head)
    while (arrow := head.rfind("->", 0, arrow)) >= 0 and not any(c in head[arrow:] for c in ";{}"):
        before = without_qualifiers(head[:arrow])
        if before.endswith(")"):
            return before
    return head


def name_before(head: str, end: int) -> tuple:
    """The identifier (with '::') that ends where `end` is, after blanks: (its start, it)."""
    k = end
    while k > 0 and head[k - 1].isspace():
        k -= 1
    start = k
    while start > 0 and (head[start - 1].isalnum() or head[start - 1] in "_:"):
        start -= 1
    return start, head[start:k]


def parameter_list_of(code_before: str):
    """Where the parameter list opens when the '{' after `code_before` opens a function's or a
    lambda's body, else None. A constructor's member initializers ("): a_(x), b_{y} {") are
    passed over to its own parameter list."""
    head = without_qualifiers(without_trailing_return(code_before.rstrip()))
    if head.endswith("]"):  # a lambda without a parameter list: "[&] {"
        k = matching_open(head, len(head) - 1, "[]")
        return k if k >= 0 else None
    while head.endswith((")", "}")):
        pair = "()" if head.endswith(")") else "{}"
        k = matching_open(head, len(head) - 1, pair)
        if k < 0:
            return None
        name_start, name = name_before(head, k)
        if name in NOT_A_FUNCTION:
            return None
        before = head[:name_start].rstrip()
        rest = without_qualifiers(before[:-1])
        # A member initializer follows the constructor's ')' and a ':' (not '::', nor the one of
        # "public:"), or another initializer and a ','.
        separated = before.endswith(",") or (before.endswith(":") and not before.endswith("::"))
        if name and separated and rest.endswith((")", "}")):
            head = rest
            continue
        return k if pair == "()" else None
    return None


def class_head_start(code_before: str):
    """Where the key word stands when the '{' after `code_before` opens a class's or struct's
    body, else None."""
    match = CLASS_HEAD.search(code_before[-1000:])
    if match is None:
        return None
    return len(code_before) - len(code_before[-1000:]) + match.start(1)


def bodies(text: str):
    """(first line, line count, kind) of every function or lambda body (kind "function") and
    every class or struct body (kind "class"); raises ValueError on a file whose braces do not
    pair up."""
    code = blank_out(text)
    line_starts = [0] + [m.end() for m in re.finditer("\n", code)]

    def line_of(offset: int) -> int:
        return bisect.bisect_right(line_starts, offset)

    found, open_braces = [], []
    for match in re.finditer(r"[{}]", code):
        if match.group() == "{":
            # What decides is just before the brace: a signature and its member initializers.
            window = max(0, match.start() - WINDOW)
            start = parameter_list_of(code[window:match.start()])
            if start is not None:
                open_braces.append((window + start, "function"))
                continue
            start = class_head_start(code[window:match.start()])
            open_braces.append(None if start is None else (window + start, "class"))
            continue
        if not open_braces:
            raise ValueError(f"a '}}' on line {line_of(match.start())} closes nothing")
        opened = open_braces.pop()
        if opened is not None:
            first = line_of(opened[0])
            found.append((first, line_of(match.start()) - first + 1, opened[1]))
    if open_braces:
        raise ValueError("a '{' is never closed")
    return found


def check(root: pathlib.Path):
    """The problems (functions and classes over their limits, files that cannot be read), every
    function body's and every class body's (length, "FILE:LINE")."""
    problems, lengths, classes = [], [], []
    for path in sorted(p for top in ("lib", "apps") for p in (root / top).rglob("*")
                       if p.suffix in SOURCES and p.is_file()):
        name = path.relative_to(root)
        text = path.read_text(errors="replace")
        if name.parts[0] == "lib" and text.count("\n") > FILE_LIMIT:
            problems.append(f"{name}: {text.count(chr(10))} lines, over {FILE_LIMIT} for a file")
        try:
            found = bodies(text)
        except ValueError as e:
            problems.append(f"{name}: cannot be read for function lengths: {e}")
            continue
        lengths += [(count, f"{name}:{line}") for line, count, kind in found if kind == "function"]
        classes += [(count, f"{name}:{line}") for line, count, kind in found if kind == "class"]
        problems += [f"{name}:{line}: {count} lines, over {LIMIT}" for line, count, kind in found
                     if kind == "function" and count > LIMIT]
        problems += [f"{name}:{line}: class of {count} lines, over {CLASS_LIMIT}"
                     for line, count, kind in found if kind == "class" and count > CLASS_LIMIT]
    return problems, lengths, classes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source_dir", type=pathlib.Path, help="the repository's root")
    root = parser.parse_args().source_dir.resolve()
    problems, lengths, classes = check(root)
    if not lengths or not classes:
        problems.append(f"no function or class bodies found under {root}: wrong SOURCE_DIR?")
    print("\n".join(problems) if problems else
          "%d function bodies read; the longest, %d lines, at %s; %d class bodies, the longest, "
          "%d lines, at %s" % (len(lengths), *max(lengths), len(classes), *max(classes)))
    return 1 if problems else 0

if __name__ == "__main__":
    sys.exit(main())
