#!/usr/bin/env python3
"""Fails on an import circle between the top-level modules of any workspace crate.

A circle (engine uses judge, judge uses session, session uses engine) hides a crate's
layers: no module of it can be read, tested or moved alone. The check reads each crate's
module tree from its roots (src/lib.rs, src/main.rs, src/bin/*) by following `mod NAME;`,
maps every file to the top-level module that holds it, collects the paths each file names
(`crate::a::...`, `use crate::{a, b::c}`, `super::` resolved against the file's place and
inline `mod` blocks, and `crate::Name` through the root's `pub use a::Name` re-exports),
and reports every strongly connected component of two or more modules, with one file that
makes each edge. Test code (`#[cfg(test)]` modules and files) is left out unless `--tests`:
a unit test sits above what it tests and may reach any layer to set it up.

Text-based on purpose (no rustc, no network): it runs in well under a second. It does not
expand macros, which this workspace does not use to name modules.

Usage: scripts/check-layers.py [--graph] [--tests]
  (from anywhere; --graph prints every edge, --tests counts test code too)
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# `#[cfg(test)]`, `#[cfg(any(test, ...))]`: what follows is test code.
TEST_CFG = re.compile(r"#\[cfg\((?:any\()?test\b")
# The attributes (and visibility) right before a `mod`, in a file's text or as joined tokens.
ATTRS = re.compile(r"((?:\s*#\[[^\[\]]*\])*)\s*(?:pub(?:\([^)]*\))?)?\s*$")

TOKEN = re.compile(
    r"""
      (?P<comment>//[^\n]*|/\*(?:.|\n)*?\*/)
    | (?P<string>b?r(?P<hashes>\#*)"(?:.|\n)*?"(?P=hashes)|b?"(?:\\.|[^"\\])*")
    | (?P<char>b?'(?:\\.|[^'\\])')
    | (?P<path>(?:::)?[A-Za-z_][A-Za-z0-9_]*(?:\s*::\s*(?:[A-Za-z_][A-Za-z0-9_]*|\{))*)
    | (?P<punct>[{};])
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)


def tokens(text: str):
    """Paths (as segment lists), braces and semicolons; comments, strings and chars dropped."""
    for m in TOKEN.finditer(text):
        kind = m.lastgroup
        if kind == "path":
            yield "path", [s.strip() for s in m.group("path").split("::") if s.strip() or s == ""]
        elif kind == "punct":
            yield m.group(), None
        elif kind == "other" and not m.group().isspace():
            yield "other", m.group()


def is_test(before: str) -> bool:
    """Whether the attributes that end `before` (the text before a `mod`) make it test code."""
    m = ATTRS.search(before[-400:])
    return bool(m and TEST_CFG.search(m.group(1)))


def use_trees(toks: list, i: int, prefix: list[str], out: list[list[str]]) -> int:
    """Expands the `{...}` group of a use tree starting after `prefix::{`; returns the index after `}`."""
    current: list[str] | None = None
    while i < len(toks):
        kind, val = toks[i]
        if kind == "}":
            if current is not None:
                out.append(prefix + current)
            return i + 1
        if kind == "path":
            segs = [s for s in val if s]
            if segs and segs[-1] == "{":
                i = use_trees(toks, i + 1, prefix + segs[:-1], out)
                current = None
                continue
            current = segs
        elif kind == "other" and val == ",":
            if current is not None:
                out.append(prefix + current)
            current = None
        i += 1
    return i


class Crate:
    def __init__(self, name: str, src: Path, with_tests: bool):
        self.name = name
        self.src = src
        self.with_tests = with_tests
        self.files: dict[Path, list[str]] = {}  # file -> module path ([] for a root)
        self.reexports: dict[str, str] = {}  # root `pub use a::Name` -> a
        self.edges: dict[tuple[str, str], Path] = {}

    def load(self) -> None:
        roots = [self.src / "lib.rs", self.src / "main.rs"]
        bindir = self.src / "bin"
        if bindir.is_dir():
            roots += sorted(bindir.glob("*.rs")) + sorted(bindir.glob("*/main.rs"))
        for root in roots:
            if root.is_file():
                self.walk(root, [], root.parent, is_root=True)

    def walk(self, file: Path, modpath: list[str], dir_: Path, is_root: bool) -> None:
        """Records FILE at MODPATH and follows its `mod NAME;` lines; DIR_ holds its children."""
        if file in self.files:
            return
        self.files[file] = modpath
        text = file.read_text(encoding="utf-8")
        for m in re.finditer(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", text, re.M):
            name = m.group(1)
            if not self.with_tests and is_test(text[: m.start()]):
                continue
            for cand, child_dir in ((dir_ / f"{name}.rs", dir_ / name), (dir_ / name / "mod.rs", dir_ / name)):
                if cand.is_file():
                    self.walk(cand, modpath + [name], child_dir, is_root=False)
                    break
        if is_root:
            for m in re.finditer(r"^\s*pub\s+use\s+(?:crate::|self::)?([a-z_][a-z0-9_]*)::([^;]+);", text, re.M):
                for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", m.group(2).split("as")[-1]):
                    self.reexports.setdefault(name, m.group(1))

    def top_modules(self) -> set[str]:
        return {p[0] for p in self.files.values() if p}

    def scan(self) -> None:
        tops = self.top_modules()
        for file, modpath in self.files.items():
            if not modpath:
                continue  # a crate root is the map, not a layer
            toks = list(tokens(file.read_text(encoding="utf-8")))
            # The module path at each point: the file's, plus inline `mod name {` blocks.
            stack: list[tuple[int, str, bool]] = []  # (brace depth it opened at, name, test-only)
            depth = 0
            pending_mod: tuple[str, bool] | None = None
            recent: list[str] = []  # the last tokens' text, for the attribute before a `mod`
            i = 0
            while i < len(toks):
                kind, val = toks[i]
                recent = (recent + [kind if val is None else "::".join(val) if kind == "path" else val])[-32:]
                if kind == "{":
                    depth += 1
                    if pending_mod is not None:
                        stack.append((depth, *pending_mod))
                        pending_mod = None
                elif kind == "}":
                    if stack and stack[-1][0] == depth:
                        stack.pop()
                    depth -= 1
                elif kind == ";":
                    pending_mod = None
                elif kind == "path":
                    here = modpath + [name for _, name, _ in stack]
                    segs = [s for s in val if s]
                    if segs == ["mod"] and i + 1 < len(toks) and toks[i + 1][0] == "path":
                        pending_mod = (toks[i + 1][1][0], is_test("".join(recent[:-1])))
                        i += 2
                        continue
                    skip = not self.with_tests and any(test for _, _, test in stack)
                    paths: list[list[str]] = []
                    if segs and segs[-1] == "{":
                        i = use_trees(toks, i + 1, segs[:-1], paths)
                    else:
                        paths.append(segs)
                        i += 1
                    for p in paths:
                        target = None if skip else self.resolve(p, here, tops)
                        if target and target != modpath[0]:
                            self.edges.setdefault((modpath[0], target), file)
                    continue
                i += 1

    def resolve(self, segs: list[str], here: list[str], tops: set[str]) -> str | None:
        """The top-level module a path names, if it names one of this crate's."""
        if not segs:
            return None
        if segs[0] == "crate":
            rest = segs[1:]
        elif segs[0] == "super":
            base = list(here)
            rest = segs
            while rest and rest[0] == "super":
                if not base:
                    return None
                base.pop()
                rest = rest[1:]
            if base:
                return base[0]
        elif segs[0] == "self" and not here:
            rest = segs[1:]
        else:
            return None
        if not rest:
            return None
        if rest[0] in tops:
            return rest[0]
        return self.reexports.get(rest[0])


def cycles(edges: dict[tuple[str, str], Path]) -> list[list[str]]:
    """Strongly connected components of two or more nodes (Tarjan)."""
    graph: dict[str, list[str]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
        graph.setdefault(b, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main() -> int:
    show_graph = "--graph" in sys.argv[1:]
    with_tests = "--tests" in sys.argv[1:]
    members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
    failed = False
    for member in members:
        manifest = tomllib.loads((ROOT / member / "Cargo.toml").read_text())
        crate = Crate(manifest["package"]["name"], ROOT / member / "src", with_tests)
        crate.load()
        crate.scan()
        if show_graph:
            for (a, b), f in sorted(crate.edges.items()):
                print(f"{crate.name}: {a} -> {b}  ({f.relative_to(ROOT)})")
        comps = cycles(crate.edges)
        for comp in comps:
            failed = True
            members_ = set(comp)
            print(f"FAIL  {crate.name}: import circle among {len(comp)} modules: {', '.join(comp)}")
            for (a, b), f in sorted(crate.edges.items()):
                if a in members_ and b in members_:
                    print(f"        {a} -> {b}  ({f.relative_to(ROOT)})")
        if not comps:
            print(f"ok    {crate.name}: {len(crate.top_modules())} top-level modules, {len(crate.edges)} edges, no circle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
