#!/usr/bin/env python3
"""Rewrites the tables of docs/knobs.md from `moerun knobs --json` (the table in src/core/knobs.cpp).

Usage: python3 tools/knobs-doc.py [path/to/moerun]   (default: build/moerun)
The prose above and between the tables is kept; each table is the block of lines starting with '|'
after a heading '## Settings', '## Measurement knobs: the `cpu` backend' or '... the `cuda` backend'.
The unit test Knobs.TheDocsListEveryKnob fails until this is run after a change to the table.
"""
import json
import subprocess
import sys
from pathlib import Path

root = Path(__file__).resolve().parent.parent
moerun = sys.argv[1] if len(sys.argv) > 1 else str(root / "build" / "moerun")
knobs = json.loads(subprocess.run([moerun, "knobs", "--json"], check=True, capture_output=True, text=True).stdout)["knobs"]


def cell(s):
    return s.replace("|", "\\|")


def rows(pick):
    out = ["| variable | values | unset | what it changes |", "|---|---|---|---|"]
    for k in knobs:
        if pick(k):
            out.append(f"| `{k['name']}` | {cell(k['values'])} | {cell(k['unset'])} | {cell(k['what'])} |")
    return out


sections = {
    "## Settings": lambda k: k["setting"],
    "## Measurement knobs: the `cpu` backend": lambda k: not k["setting"] and k["area"] == "cpu",
    "## Measurement knobs: the `cuda` backend": lambda k: not k["setting"] and k["area"] == "cuda",
}
doc = root / "docs" / "knobs.md"
lines = doc.read_text().splitlines()
out, i, pick = [], 0, None
while i < len(lines):
    line = lines[i]
    if line in sections:
        pick = sections[line]
    if pick and line.startswith("|"):
        out.extend(rows(pick))
        while i < len(lines) and lines[i].startswith("|"):
            i += 1
        pick = None
        continue
    out.append(line)
    i += 1
doc.write_text("\n".join(out) + "\n")
print(f"wrote {doc} ({len(knobs)} knobs)")
