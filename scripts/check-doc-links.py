#!/usr/bin/env python3
"""Checks the Markdown documentation: every relative link resolves to a file or directory, every
#anchor names a heading of its target (GitHub's slugs), and every `make <target>` mentioned is a
target of the Makefile. Usage: scripts/check-doc-links.py [--allow-missing FILE ...]
(FILE: a path relative to the repository, e.g. docs/architecture.md, that another change adds).
Prints one line per problem; exit 1 if any."""
import os, re, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
allow = set()
args = sys.argv[1:]
if args[:1] == ["--allow-missing"]:
    allow = {os.path.normpath(a) for a in args[1:]}

def md_files():
    yield "README.md"
    for d, _, files in os.walk(os.path.join(ROOT, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.relpath(os.path.join(d, f), ROOT)

def strip_code(text):
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)

def slugs(path):
    out, seen = set(), {}
    for line in strip_code(open(os.path.join(ROOT, path)).read()).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if not m:
            continue
        s = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower().replace("`", "")).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out

targets = set(re.findall(r"^([a-zA-Z][\w-]*):", open(os.path.join(ROOT, "Makefile")).read(), re.M))
problems, links = [], 0
for md in md_files():
    text = open(os.path.join(ROOT, md)).read()
    prose = strip_code(text)
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"[a-z]+:", target):
            continue
        links += 1
        path, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
        if dest in allow:
            continue
        if not os.path.exists(os.path.join(ROOT, dest)):
            problems.append(f"{md}: {target}: {dest} does not exist")
        elif anchor and dest.endswith(".md") and anchor not in slugs(dest):
            problems.append(f"{md}: {target}: no heading #{anchor} in {dest}")
    for t in re.findall(r"\bmake ([a-z][\w-]*)", text):
        if t not in targets:
            problems.append(f"{md}: `make {t}`: no such Makefile target")
print("\n".join(problems) or f"ok: {links} relative links, every `make` target exists")
sys.exit(1 if problems else 0)
