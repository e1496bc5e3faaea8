#!/usr/bin/env python3
"""The include graph between src/'s folders, checked against the layer order.

usage: scripts/include_graph.py [SRC]   (default: src/ beside this script)

Prints each folder's includes of other folders, the cycles of folders (strongly connected sets)
and every include that points up the order below; exits 1 when there is a cycle or an upward
include that ALLOWED does not list. docs/architecture.md explains the order.
"""
import os
import re
import sys

# Bottom first: a folder may include the folders before it, never one after it.
LAYERS = ["core", "io", "ops", "comm", "parallel", "nn", "data", "models", "optim", "memory", "pipeline",
          "distributed", "config", "sim", "engine", "cli"]

# Upward includes that stay until their move is done, each as (folder, header) with the reason.
ALLOWED = set()


def folder(rel):
    return rel.split("/")[0]


def graph(src):
    edges = {}
    for dirpath, _, files in os.walk(src):
        for name in files:
            if not name.endswith((".h", ".cpp", ".cu", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, src)
            with open(path, errors="replace") as f:
                for line in f:
                    m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                    if not m or "/" not in m.group(1):
                        continue
                    target = m.group(1)
                    a, b = folder(rel), folder(target)
                    if a != b and os.path.isdir(os.path.join(src, b)):
                        edges.setdefault((a, b), []).append((rel, target))
    return edges


def cycles(edges):
    nodes = sorted({n for e in edges for n in e})
    adj = {n: sorted({b for (a, b) in edges if a == n}) for n in nodes}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in adj[v]:
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

    for n in nodes:
        if n not in index:
            visit(n)
    return out


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
    edges = graph(src)
    rank = {n: i for i, n in enumerate(LAYERS)}
    unknown = sorted({n for e in edges for n in e if n not in rank})
    found = cycles(edges)
    upward, allowed = [], []
    for (a, b), incs in sorted(edges.items()):
        if a in rank and b in rank and rank[b] > rank[a]:
            for rel, target in incs:
                (allowed if (a, target) in ALLOWED else upward).append(f"{rel} -> {target}")
    print("layers, bottom first:", " ".join(LAYERS))
    for (a, b), incs in sorted(edges.items()):
        print(f"  {a} -> {b}: {len(incs)}")
    print("cycles of folders:", found if found else "none")
    print(f"includes up the layers: {len(upward)} (and {len(allowed)} allowed while they move)")
    for line in upward:
        print("  ", line)
    for line in allowed:
        print("   allowed:", line)
    if unknown:
        print("folders missing from LAYERS:", " ".join(unknown))
    return 1 if found or upward or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
