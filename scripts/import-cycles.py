#!/usr/bin/env python3
"""Finds import circles between the source files of a Rust crate.

    scripts/import-cycles.py SRC_DIR [SRC_DIR ...]

A file "takes a name" from another when it names an item the other defines:
through `use`, or a path such as `crate::a::B` or `super::c::D` in its code.
Re-exports are followed to the file that defines the item, so a parent's
`pub use child::X` is no edge by itself, and declaring a module (`mod x;`)
is none either. Tests are left out (files named `*_tests.rs` or
`tests.rs`, files under a `*_tests/` folder, and inline `#[cfg(test)]`
modules): a test reads what it tests.

Prints each circle (a strongly connected group of files) and exits 1 when
there is one; exits 0 and prints nothing otherwise. Best effort for this
project's code: glob re-exports (`pub use x::*`) and macros are not
followed.
"""
import os
import re
import sys

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
MOD_DECL = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
USE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.M)
PATH = re.compile(r"\b(crate|super|self)((?:::\w+)+)")


def strip(text):
    return STRING.sub('""', COMMENT.sub("", text))


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> [(['a','b'], 'b'), (['a','c','d'], 'd'), (['a','c','e'], 'f')]."""
    tree = re.sub(r"\s+", "", re.sub(r"\s+as\s+", "@", tree))
    out = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        for p in filter(None, parts):
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x], rest[:-1])
            else:
                p, _, alias = p.partition("@")
                segs = prefix + [x for x in p.split("::") if x]
                if segs:
                    out.append((segs, alias or segs[-1]))

    walk([], tree)
    return out


class Module:
    def __init__(self, path, file):
        self.path = path  # ['election', 'observe']
        self.file = file
        self.children = {}
        self.exports = {}  # name -> absolute segs (re-exports and imports)
        self.text = ""


def load(src):
    root_file = os.path.join(src, "lib.rs")
    if not os.path.exists(root_file):
        root_file = os.path.join(src, "main.rs")
    modules = {}

    def visit(path, file):
        m = Module(path, file)
        modules[tuple(path)] = m
        with open(file) as f:
            m.text = strip(f.read())
        here = os.path.dirname(file)
        base = os.path.basename(file)
        folder = here if base in ("mod.rs", "lib.rs", "main.rs") else os.path.join(here, base[:-3])
        for name in MOD_DECL.findall(m.text):
            for cand in (os.path.join(folder, name + ".rs"), os.path.join(folder, name, "mod.rs")):
                if os.path.exists(cand):
                    m.children[name] = visit(path + [name], cand)
                    break
        return m

    visit([], root_file)
    return modules


def absolute(module, segs):
    """Resolves a path's leading `crate`/`super`/`self`/child segment."""
    if not segs:
        return None
    head = segs[0]
    if head == "crate":
        return segs[1:]
    if head == "self":
        return module.path + segs[1:]
    if head == "super":
        base = module.path
        while segs and segs[0] == "super":
            base = base[:-1]
            segs = segs[1:]
        return base + segs
    if head in module.children:
        return module.path + segs
    return None  # an external crate or std


def define(modules, segs, depth=0):
    """The file that defines the item at absolute path `segs`."""
    if depth > 20:
        return None
    mod = modules[()]
    for i, seg in enumerate(segs):
        if seg in mod.children:
            mod = mod.children[seg]
            continue
        if seg in mod.exports:
            target = mod.exports[seg]
            return define(modules, target + segs[i + 1:], depth + 1)
        return mod.file
    return None  # a module itself: no item taken


def is_test(file):
    parts = file.split(os.sep)
    return (
        file.endswith("_tests.rs")
        or file.endswith(os.sep + "tests.rs")
        or any(p.endswith("_tests") for p in parts[:-1])
    )


def graph(src):
    modules = load(src)
    # Pass 1: every module's `use` items as name -> absolute path.
    for m in modules.values():
        for _vis, tree in USE.findall(m.text):
            for segs, alias in expand(tree):
                if segs[-1] == "*" or segs[-1] == "self":
                    continue
                target = absolute(m, segs)
                if target is not None:
                    m.exports[alias] = target
    edges = {}
    for m in modules.values():
        if is_test(m.file):
            continue
        # Inline test modules read their parent: not edges.
        text = re.split(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", m.text)[0]
        targets = set()
        # The code without its `use` items, where a re-exported name must
        # appear for the re-export to count as taking it.
        code = USE.sub("", text)
        for vis, tree in USE.findall(text):
            for segs, alias in expand(tree):
                if segs[-1] in ("*", "self"):
                    continue
                if vis and not re.search(r"\b%s\b" % re.escape(alias), code):
                    continue
                target = absolute(m, segs)
                if target is not None:
                    targets.add(define(modules, target))
        for head, rest in PATH.findall(text):
            segs = [head] + [s for s in rest.split("::") if s]
            target = absolute(m, segs)
            if target is not None:
                targets.add(define(modules, target))
        edges[m.file] = {t for t in targets if t and t != m.file and not is_test(t)}
    return edges


def cycles(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return out


def main(dirs):
    found = False
    for src in dirs:
        edges = graph(src)
        for group in cycles(edges):
            found = True
            print(f"import circle in {src}:")
            for f in group:
                takes = sorted(t for t in edges[f] if t in group)
                print(f"  {f} takes from {', '.join(takes)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
