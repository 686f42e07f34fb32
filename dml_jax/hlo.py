"""Inspecting what XLA made of a compiled operator or graph: its optimized HLO, and the work in
the HLO's ENTRY computation (kernels, copies, unfused operations, and what each reads).

Tests and examples use these to show fusion (one program, one pass over the input, no
materialised intermediate) rather than claim it.
"""

from __future__ import annotations

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
