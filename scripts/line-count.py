#!/usr/bin/env python3
"""Lines of code of the four published crates, tests and comments left out.

    scripts/line-count.py [REPO]      # default: this checkout

Counts the `.rs` files under `src/` of idem-tools (`src/`), idem-tools-macros (`idem-macros/`),
idem-tools-runtime (`idem-runtime/`) and idem-tools-cli (`idem-cli/`): every line that is not
blank and not only a comment (`//`, `///`, `//!`, or inside `/* … */`). Left out: items under
`#[cfg(test)]` (an inline `mod tests { … }` up to its closing brace, and the files of a
`#[cfg(test)] mod name;`, with their submodules), and `tests/`, `benches/` and `examples/`
(outside `src/`). Doc comments are comments: a line of code is what the compiler builds.
Prints one line per crate and the total.
"""

import os
import re
import sys

CRATES = [
    ("idem-tools", "src"),
    ("idem-tools-macros", "idem-macros/src"),
    ("idem-tools-runtime", "idem-runtime/src"),
    ("idem-tools-cli", "idem-cli/src"),
]


def strip_comments(text):
    """`text` with comments replaced by spaces (newlines kept), strings left alone."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"' or (c == "r" and re.match(r'r#*"', text[i:i + 10])
                          and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_"))):
            m = re.match(r'r(#*)"', text[i:]) if c == "r" else None
            if m:
                end = '"' + m.group(1)
                j = text.find(end, i + len(m.group(0)))
                j = n if j < 0 else j + len(end)
            else:
                j = i + 1
                while j < n and text[j] != '"':
                    j += 2 if text[j] == "\\" else 1
                j += 1
            out.append(text[i:j])
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]) or text.startswith("'\\u{", i):
            j = text.find("'", i + 1) + 1
            out.append(text[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def test_items(code):
    """Line spans of inline `#[cfg(test)]` items, and the names (and `#[path]`s) of
    `#[cfg(test)] mod name;` declarations."""
    spans, files = [], []
    for m in re.finditer(r"#\[cfg\(test\)\]", code):
        rest = code[m.end():]
        path = re.match(r'\s*#\[path\s*=\s*"([^"]+)"\]', rest)
        decl = re.match(r'(\s*#\[[^\]]*\])*\s*(pub(\([^)]*\))?\s+)?mod\s+(\w+)\s*;', rest)
        if decl:
            files.append((decl.group(4), path.group(1) if path else None))
            continue
        start = code.count("\n", 0, m.start())
        brace = code.find("{", m.end())
        semi = code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            end = code.count("\n", 0, semi)
        else:
            depth, j = 0, brace
            while j < len(code):
                if code[j] == "{":
                    depth += 1
                elif code[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            end = code.count("\n", 0, j)
        spans.append((start, end))
    return spans, files


def module_dir(path):
    base = os.path.basename(path)
    if base in ("mod.rs", "lib.rs", "main.rs"):
        return os.path.dirname(path)
    return os.path.splitext(path)[0]


def count_crate(root):
    files = []
    for dirpath, _, names in os.walk(root):
        files += [os.path.join(dirpath, n) for n in names if n.endswith(".rs")]
    excluded, total = set(), 0
    # Test-only files first: they may declare submodules of their own.
    for path in sorted(files):
        code = strip_comments(open(path, encoding="utf-8").read())
        _, decls = test_items(code)
        for name, explicit in decls:
            if explicit:
                target = os.path.normpath(os.path.join(os.path.dirname(path), explicit))
                excluded.add(target)
                excluded.add(os.path.splitext(target)[0])
            else:
                base = os.path.join(module_dir(path), name)
                excluded.update({base + ".rs", os.path.join(base, "mod.rs"), base})
    for path in sorted(files):
        if any(path == e or path.startswith(e + os.sep) for e in excluded):
            continue
        code = strip_comments(open(path, encoding="utf-8").read())
        spans, _ = test_items(code)
        for i, line in enumerate(code.split("\n")):
            if line.strip() and not any(a <= i <= b for a, b in spans):
                total += 1
    return total


def main():
    repo = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    grand = 0
    for name, src in CRATES:
        lines = count_crate(os.path.join(repo, src))
        grand += lines
        print(f"{name}: {lines}")
    print(f"total: {grand}")


if __name__ == "__main__":
    main()
