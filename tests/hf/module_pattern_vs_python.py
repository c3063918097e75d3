#!/usr/bin/env python3
"""Differential check of moerun's module-name patterns (src/core/module_pattern.hpp) against Python's
own `re`, which wrote the compressed-tensors configs they come from: random patterns of the subset
moerun reads (and some constructs it refuses) over random names. Every answer must be Python's, or a
refusal where Python refuses too; a refusal of a pattern Python compiles counts separately (allowed
for lookarounds and back-references, which moerun does not read).

usage: module_pattern_vs_python.py <path to module_pattern_probe> [seed]
"""
import os
import random
import re
import signal
import subprocess
import sys
import warnings

warnings.simplefilter("ignore")  # Python warns of "possible nested set" ([[:a]]), which it still reads

ATOMS = ["a", "b", ".", "\\.", "[ab]", "[^a]", "[a-c]", "\\d", "\\w", "(a|b)", "(?:ab|a)", "()", "[]a]", "x", "0",
         "1", "\\-", "{", "}", "]", "\\A", "\\Z", "^", "$", "[\\d.]", "[[:a]]", "[.-]", "[a-]", "a|", "|a",
         "(?=a)", "(a)\\1", "\\b", "\\s", "\\S", "\\x41", "[\\d-z]", "\u00e9"]
QUANTS = ["", "", "", "*", "+", "?", "{2}", "{1,2}", "{,2}", "{2,}", "*?", "+?", "{2,1}"]


def pattern(rng, depth=0):
    out = ""
    for _ in range(rng.randint(0, 4)):
        atom = rng.choice(ATOMS)
        if depth < 2 and rng.random() < 0.2:
            atom = "(" + pattern(rng, depth + 1) + ")"
        out += atom + rng.choice(QUANTS)
    if depth < 2 and rng.random() < 0.15:
        out += "|" + pattern(rng, depth + 1)
    return out


def main():
    probe = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    names = ["".join(rng.choice("ab.x01-{}] A\x1c") for _ in range(rng.randint(0, 6))) for _ in range(40)]
    names += ["model.layers.0.mlp.experts.0.gate_proj", "model.layers.3.mlp.gate", "lm_head"]
    cases = [(pattern(rng), rng.choice(names)) for _ in range(20000)]
    text = "".join(p + "\n" + n + "\n" for p, n in cases)
    got = subprocess.run([probe], input=text, capture_output=True, text=True, check=True).stdout.split()
    assert len(got) == len(cases), f"{len(got)} answers for {len(cases)} cases"
    # Python's own matcher backtracks: nested repeats over a long name can take it minutes. Such a case
    # has no answer to compare with and is counted apart.
    def too_slow(*_):
        raise TimeoutError
    signal.signal(signal.SIGALRM, too_slow)
    wrong = refused = slow = 0
    for (p, n), g in zip(cases, got):
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        try:
            want = "1" if re.compile(p).match(n) else "0"
        except re.error:
            want = "E"
        except TimeoutError:
            slow += 1
            continue
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if g == "E" and want != "E":
            refused += 1
        elif g != want:
            wrong += 1
            if wrong <= 10:
                print(f"MISMATCH pattern {p!r} name {n!r}: moerun {g}, Python {want}")
    print(f"seed {seed}: {len(cases)} cases, {wrong} wrong, {refused} refused that Python reads, "
          f"{slow} that Python's backtracking did not answer in 0.5 s")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
