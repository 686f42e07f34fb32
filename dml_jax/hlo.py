"""Inspecting what XLA made of a compiled operator or graph: its optimized HLO, and the work in
the HLO's ENTRY computation (kernels, copies, unfused operations, and what each reads).

Tests and examples use these to show fusion (one program, one pass over the input, no
materialised intermediate) rather than claim it.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from .compile import CompiledOperator

_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(\S+)\s*=\s*(.+?)\s([a-z][\w-]*)\((.*)$")
_PLUMBING = ("parameter", "constant", "tuple", "get-tuple-element", "bitcast")


class HloInstruction(NamedTuple):
    """One instruction of an optimized program's ENTRY computation.

    Attributes:
        name: the HLO instruction name (``reduce_bitcast_fusion``, ``copy``).
        opcode: ``fusion``, ``copy``, or an unfused operation.
        kind: the fusion kind (``kLoop``, ``kInput``, ...), ``""`` for other opcodes.
        shape: the result type, e.g. ``f32[1,2,1,1]{3,2,1,0}``.
        operands: what it reads: ``parameter(i)`` for the program's i-th argument, otherwise
            the name of the instruction that produced it (through tuples and bitcasts).
    """

    name: str
    opcode: str
    kind: str
    shape: str
    operands: tuple[str, ...]


def optimized_hlo(op: CompiledOperator, *inputs: Any) -> str:
    """The optimized HLO module XLA runs for ``op(*inputs)`` (after fusion), as text.

    Compiles the same jitted function that calling ``op`` uses, for the inputs' shapes and dtypes.
    """
    return op._jitted.lower(*op.check_inputs(inputs)).compile().as_text()


def entry_instructions(hlo_text: str) -> tuple[HloInstruction, ...]:
    """The work in an optimized program: its ENTRY instructions other than plumbing.

    Parameters, constants, bitcasts and the tuples of multi-output programs are left out; what
    remains is what the program executes (``fusion`` kernels, ``copy``, unfused operations).
    """
    start = hlo_text.find("\nENTRY ")
    if start < 0:
        raise ValueError("no ENTRY computation in the HLO text")
    alias: dict[str, str] = {}  # plumbing instruction -> what it stands for
    result = []
    for line in hlo_text[start + 1 :].splitlines()[1:]:
        if line.startswith("}"):
            break
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        name, shape, opcode, rest = match.groups()
        args = re.findall(r"%([\w.\-]+)", rest.split(")", 1)[0])
        operands = tuple(alias.get(a, a) for a in args)
        if opcode == "parameter":
            alias[name] = f"parameter({rest.split(')', 1)[0].strip()})"
        elif opcode in _PLUMBING:
            alias[name] = operands[0] if len(operands) == 1 else name
        else:
            kind = re.search(r"\bkind=(k\w+)", rest)
            result.append(
                HloInstruction(name, opcode, kind.group(1) if kind else "", shape, operands)
            )
    return tuple(result)


# Instructions that move data between devices, as XLA names them.
COLLECTIVE_KINDS = (
    "all-reduce",
    "all-gather",
    "reduce-scatter",
    "all-to-all",
    "collective-permute",
)
_ELEMENT_BYTES = {"pred": 1, "s8": 1, "u8": 1, "f8e4m3fn": 1, "f8e5m2": 1, "s16": 2, "u16": 2,
                  "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8,
                  "f64": 8, "c64": 8, "c128": 16}  # fmt: skip


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """What a compiled program communicates, from its optimized HLO text (``optimized_hlo``, or
    ``jax.jit(f).lower(...).compile().as_text()``), in any of its computations: for each kind
    of ``COLLECTIVE_KINDS`` it holds, ``count`` (an asynchronous collective, a ``-start`` /
    ``-done`` pair, counts once) and ``bytes``, the size of its results (a combined
    collective's parts each count; an asynchronous one's are its ``-done``'s)."""
    found: dict[str, dict[str, int]] = {}
    for line in hlo_text.splitlines():
        match = _INSTRUCTION.match(line)
        if match is None:
            continue
        _, shape, opcode, _ = match.groups()
        kind = opcode.removesuffix("-start").removesuffix("-done")
        if kind not in COLLECTIVE_KINDS:
            continue
        entry = found.setdefault(kind, {"count": 0, "bytes": 0})
        entry["count"] += not opcode.endswith("-done")
        if not opcode.endswith("-start"):
            entry["bytes"] += sum(
                _ELEMENT_BYTES.get(t, 4) * math.prod(int(d) for d in dims.split(",") if d)
                for t, dims in re.findall(r"\b([a-z]\w*)\[([\d,]*)\]", shape)
            )
    return found
