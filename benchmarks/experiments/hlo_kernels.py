"""What each kernel of a compiled XLA program computes, from a dump of its optimized HLO: for
issue 64's decode step, which of a token's ~330 small GPU kernels come from which part of a
layer, and so which could be one.

XLA's GPU compiler launches one kernel per fusion (``fusion`` instruction), per library call
(``custom-call``: cuBLAS, cuDNN, a Pallas kernel) and per copy or collective that stays its own.
This lists those of one computation (by default the body of the program's largest while loop:
a decode run's steps; else the entry), with those of the computations it calls in their
place, in order, each with its kind, its output shape and the
operations fused into it (a histogram of the fused computation's opcodes), then a count by
"signature" (kind and fused opcodes): the kernels a layer repeats show as counts of the layer
count. Works on any dump (a CPU one, for testing it).

Usage: dump with ``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text"`` (``decode_step_gpu.py
--dump-hlo`` does, into ``$OUT/hlo-<run>``), then ``python3
benchmarks/experiments/hlo_kernels.py DIR/module_NNNN.jit_steps...after_optimizations.txt``
(``--entry`` lists the entry computation instead of the loop body; ``--top N`` the signatures).
"""

from __future__ import annotations

import argparse
import collections
import re

_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s+\(.*\{\s*$")
_INSTR = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([a-z][\w\-]*)\((.*)$")
LAUNCHES = ("fusion", "custom-call", "copy", "all-reduce", "all-gather", "reduce-scatter",
            "collective-permute", "all-to-all", "sort", "scatter", "gather",
            "dynamic-update-slice", "dynamic-slice", "reduce", "convolution", "dot")  # fmt: skip


def computations(text: str) -> dict[str, list[tuple[str, str, str, str]]]:
    """Computation name -> its instructions (name, shape, opcode, the rest of the line); the
    entry computation also under ``"ENTRY"``."""
    out: dict[str, list] = {}
    current = None
    for line in text.splitlines():
        if current is None:
            m = None if line[:1].isspace() else _HEADER.match(line)
            if m:
                current = m.group(2)
                out[current] = []
                if m.group(1):
                    out["ENTRY"] = out[current]
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _INSTR.match(line)
        if m:
            out[current].append((m.group(2), m.group(3), m.group(4), m.group(5)))
    return out


def _called(rest: str, key: str) -> str | None:
    m = re.search(key + r"=%?([\w.\-]+)", rest)
    return m.group(1) if m else None


def loop_body(comps: dict) -> str | None:
    """The body of the while loop whose body launches the most kernels, or None."""
    best, count = None, -1
    for instrs in comps.values():
        for _, _, op, rest in instrs:
            body = _called(rest, "body") if op == "while" else None
            if body in comps:
                n = sum(1 for i in comps[body] if i[2] in LAUNCHES)
                if n > count:
                    best, count = body, n
    return best


def kernels(comps: dict, name: str, seen: frozenset = frozenset()) -> list[dict]:
    """The launches of computation ``name``, those of the computations it calls (``call``,
    a loop's body, a conditional's branches) in their place: kind, output shape, fused
    opcodes, target."""
    out = []
    for inst, shape, op, rest in comps[name]:
        inner = [_called(rest, k) for k in ("to_apply", "body")] if op in ("call", "while") else []
        if op == "conditional":
            inner = re.findall(r"%?([\w.\-]+)", (re.search(r"branch_computations=\{([^}]*)\}", rest)
                                                   or re.search(r"()", "")).group(1))  # fmt: skip
        for c in inner:
            if c in comps and c not in seen:
                out += kernels(comps, c, seen | {name})
        if op not in LAUNCHES:
            continue
        fused = collections.Counter()
        called = _called(rest, "calls")
        if op == "fusion" and called in comps:
            fused.update(i[2] for i in comps[called] if i[2] != "parameter")
        target = re.search(r'custom_call_target="([^"]+)"', rest)
        kind = re.search(r"kind=(k\w+)", rest)
        out.append({
            "name": inst, "op": op, "shape": shape.split("{")[0],
            "kind": kind.group(1) if kind else (target.group(1) if target else ""),
            "fused": dict(fused),
        })  # fmt: skip
    return out


def signature(k: dict) -> str:
    ops = ",".join(o + (f"x{n}" if n > 1 else "") for o, n in sorted(k["fused"].items()))
    return f"{k['op']}[{k['kind']}] {ops}".strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("path")
    p.add_argument("--entry", action="store_true", help="the entry computation, not a loop body")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--list", action="store_true", help="every launch in order too")
    a = p.parse_args()
    with open(a.path) as f:
        comps = computations(f.read())
    name = None if a.entry else loop_body(comps)
    name = name or "ENTRY"
    ks = kernels(comps, name)
    print(f"{a.path}: {name}: {len(ks)} launches")
    if a.list:
        for k in ks:
            print(f"  {k['name']:40s} {signature(k)[:110]}  -> {k['shape']}")
    counts = collections.Counter(signature(k) for k in ks)
    for sig, n in counts.most_common(a.top):
        print(f"{n:5d}  {sig[:150]}")


if __name__ == "__main__":
    main()
