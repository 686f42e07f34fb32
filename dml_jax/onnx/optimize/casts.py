"""Casts that come back to where they started (the ``basic`` level, as onnxruntime's
CastChainElimination, limited here to chains that change no value).

A float16 model exported by PyTorch casts some tensors to float32 and straight back (LLaMA's
eager attention: its softmax's float16 probabilities through ``.to(float32)`` and then
``.to(float16)`` again before the weights' product, when the whole model runs in float16).
Such a pair is the identity where the first cast widens exactly (every value of the first type
is a value of the second: float16 into float32 or float64, a narrower integer into a wider one
that holds its range), and it hides the pattern later rewrites look for: AttentionFusion sees
the probabilities read by a CAST rather than by the second GEMM.

``CastChainElimination`` removes such a pair: the second cast's readers read the first cast's
source, whose bytes are the second cast's output (the same type and sizes, packed at both
ends). onnxruntime's rule of that name also removes chains that round (float32 to float16 and
back); those change values, and stay here.
"""

from __future__ import annotations

from . import Editor, rewrite

# The exact widenings: every value of the key type is a value of each type it lists.
_WIDER = {
    "FLOAT16": ("FLOAT32", "FLOAT64"),
    "FLOAT32": ("FLOAT64",),
    "INT8": ("INT16", "INT32", "INT64", "FLOAT16", "FLOAT32", "FLOAT64"),
    "UINT8": ("UINT16", "UINT32", "UINT64", "INT16", "INT32", "INT64")
    + ("FLOAT16", "FLOAT32", "FLOAT64"),
    "INT16": ("INT32", "INT64", "FLOAT32", "FLOAT64"),
    "UINT16": ("UINT32", "UINT64", "INT32", "INT64", "FLOAT32", "FLOAT64"),
    "INT32": ("INT64", "FLOAT64"),
    "UINT32": ("UINT64", "INT64", "FLOAT64"),
}


def widens_exactly(source: str, target: str) -> bool:
    """Every value of data type ``source`` is one of ``target`` (DML data type names)."""
    return target in _WIDER.get(source, ())


@rewrite("CastChainElimination", "basic")
def cast_chains(g: Editor) -> int:
    """A CAST that widens exactly, read only by a CAST back to its input's type: both removed,
    the second's readers reading the first's source."""
    count = 0
    for n in g.live():
        if g.op(n) != "CAST" or not g.reads_as_written(n, 0):
            continue
        first = g.nodes[n]
        start, mid = first.input_tensor.data_type.name, first.output_tensor.data_type.name
        if not widens_exactly(start, mid) or not first.output_tensor.is_packed:
            continue
        user = g.only_user((n, 0))
        if user is None or g.op(user[0]) != "CAST" or not g.reads_as_written(*user):
            continue
        back = user[0]
        out = g.nodes[back].output_tensor
        src = g.source(n, 0)
        theirs = g.output_desc(src)
        if out.data_type != theirs.data_type or out.sizes != theirs.sizes or not out.is_packed:
            continue
        if g.is_output((back, 0)):
            continue  # a graph output keeps its own node
        g.reroute((back, 0), src)
        g.remove(back, n)
        count += 1
    return count
