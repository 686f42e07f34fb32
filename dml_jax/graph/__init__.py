"""DML_GRAPH_DESC: operator graphs validated like DirectML's CompileGraph, lowered to one program.

A ``GraphDesc`` holds operator descriptions (its nodes) and the edges that route tensors between
the graph's inputs, the nodes and the graph's outputs. ``compile_graph`` validates the whole
graph in plain Python, then builds a single function that evaluates every node's lowering in
topological order; under ``jax.jit`` that is one XLA program, so XLA fuses across operator
boundaries (a CLIP feeding a REDUCE reads its input once).

Node input and output indices count tensors in schema order, each element of a tensor array
(JOIN's InputTensors, SPLIT's OutputTensors) counting once and absent optional tensors (GEMM's
CTensor) counting too, as DirectML numbers them: exactly ``desc.edge_slots(INPUT)`` and
``desc.edge_slots(OUTPUT)``; an edge to an absent one is an error.

Three modules, one concern each: ``records`` (the graph, edge and node dataclasses),
``validation`` (the rules, giving a ``GraphPlan``) and ``tracing`` (the plan as one jitted
function, ``compile_graph``). This package re-exports their public names, and the optimized-HLO
helpers of ``dml_jax.hlo`` that the docs reach through it.
"""

from ..hlo import HloInstruction, entry_instructions, optimized_hlo
from .records import (
    GRAPH,
    ConstantDataNode,
    FunctionNode,
    GraphDesc,
    InputGraphEdge,
    IntermediateGraphEdge,
    OutputGraphEdge,
)
from .tracing import CompiledGraph, compile_graph
from .validation import GraphPlan, constant_value, validate_graph, validated_plan

__all__ = [
    "GRAPH",
    "CompiledGraph",
    "ConstantDataNode",
    "FunctionNode",
    "GraphDesc",
    "GraphPlan",
    "HloInstruction",
    "InputGraphEdge",
    "IntermediateGraphEdge",
    "OutputGraphEdge",
    "compile_graph",
    "constant_value",
    "entry_instructions",
    "optimized_hlo",
    "validate_graph",
    "validated_plan",
]
