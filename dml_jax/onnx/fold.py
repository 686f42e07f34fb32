"""Import-time constant folding: a node whose inputs are all known at import is evaluated once
on the host and its outputs become constants of the program, as ONNX Runtime's constant
folding does with its CPU kernels.

The evaluation is the ``onnx`` package's reference implementation of the op
(``onnx.reference.ReferenceEvaluator``), one evaluator per distinct node signature (op type,
attributes, opset), so shape chains of hundreds of nodes fold in a fraction of a second. Not
folded: nondeterministic ops, nodes with subgraphs, and nodes whose result would exceed
``FOLD_LIMIT_BYTES``. A node that reads a parameter (a floating-point initializer, which
``InferenceSession.apply`` may replace) is evaluated too, but stays in the graph: its value at
import is kept as its outputs' shadows, for the converters that need it as a constant.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ValidationError
from .elements import ONNX
from .importer import Value, const_value

NONDETERMINISTIC = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    }
)
# Ops whose converter evaluates known inputs itself: ImageDecoder's reference keeps an image's
# own channels (4 for RGBA, none for a grayscale PNG), where the converter gives pixel_format's.
CONVERTER_EVALUATES = frozenset({"ImageDecoder"})
FOLD_LIMIT_BYTES = 1 << 30


class NotEvaluated(ValidationError):
    """The reference implementation could not evaluate a node; the importer then converts it
    as it would any other node (it is computed by DirectML's operators on the device)."""


def foldable(node: Any, domain: str, inputs: Sequence[Value | None], schema: Any) -> bool:
    """Whether ``node`` can be evaluated at import: every input's value is known (constants,
    parameters, values computed from them)."""
    if domain or schema is None:
        return False
    if node.op_type in NONDETERMINISTIC or node.op_type in CONVERTER_EVALUATES:
        return False
    present = [v for v in inputs if v is not None]
    if not present or any(v.known is None for v in present):
        return False
    return not any(a.g.node or a.graphs for a in node.attribute)


def reads_parameters(inputs: Sequence[Value | None]) -> bool:
    """Whether a node reads a parameter or a value computed from one: it then stays in the
    graph (``InferenceSession.apply`` may replace the parameter), its value at import kept as
    its outputs' shadows."""
    return any(v is not None and (v.param is not None or v.shadow is not None) for v in inputs)


def _result_elements(node: Any, inputs: Sequence[Value | None]) -> int | None:
    """The element count of a generator's output, from its input values (None: not a
    generator, whose outputs are no larger than its inputs in the ways that matter)."""
    op = node.op_type
    consts = [None if v is None else v.known for v in inputs]
    try:
        if op == "ConstantOfShape":
            return math.prod(int(d) for d in consts[0].reshape(-1))
        if op == "Expand":
            return math.prod(np.broadcast_shapes(consts[0].shape, tuple(consts[1].reshape(-1))))
        if op == "Tile":
            return consts[0].size * math.prod(int(r) for r in consts[1].reshape(-1))
        if op == "Range":
            start, limit, delta = (float(c) for c in consts[:3])
            return max(0, math.ceil((limit - start) / delta)) if delta else None
        if op in ("HannWindow", "HammingWindow", "BlackmanWindow"):
            return int(consts[0].reshape(-1)[0])
        if op == "OneHot":
            return consts[0].size * abs(int(consts[1].reshape(-1)[0]))
        if op == "Pad" and len(consts) > 1 and consts[1] is not None:
            pads = [int(p) for p in consts[1].reshape(-1)]
            half = len(pads) // 2
            grown = [d + max(a, 0) + max(b, 0) for d, a, b in
                     zip(consts[0].shape, pads[:half], pads[half:])]  # fmt: skip
            return math.prod(grown)
        if op in ("Resize", "Upsample"):
            return _resized_elements(consts)
    except (ValueError, TypeError, IndexError, AttributeError, OverflowError):
        return None
    return None


def _resized_elements(consts: Sequence[Any]) -> int | None:
    """A Resize's (or Upsample's) output element count from its sizes or scales (the last
    of its inputs that holds values), rounded up: a bound, not the exact rule."""
    x = consts[0]
    for given in reversed(consts[1:]):
        if given is None or given.size == 0:
            continue
        values = [float(v) for v in given.reshape(-1)]
        if given.dtype.kind in "iu":
            return math.prod(int(v) for v in values)
        if len(values) == x.ndim:
            return math.prod(math.ceil(d * max(v, 0.0)) for d, v in zip(x.shape, values))
    return None


@functools.lru_cache(maxsize=512)
def _evaluator(signature: bytes, opset: int) -> Any:
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    # A one-node model carries the opset (an evaluator of a bare node takes the newest).
    node = onnx.NodeProto.FromString(signature)
    graph = helper.make_graph(
        [node],
        "fold",
        [helper.make_empty_tensor_value_info(n) for n in node.input if n],
        [helper.make_empty_tensor_value_info(n) for n in node.output],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model)


def evaluate(
    node: Any,
    domain: str,
    opset: int,
    inputs: Sequence[Value | None],
    where: str,
    max_memory: int | None = None,
) -> list[Value | None]:
    """The outputs of ``node`` evaluated on its inputs' constant values (at most
    ``FOLD_LIMIT_BYTES`` or ``max_memory`` bytes of result, the smaller)."""
    import onnx

    count = _result_elements(node, inputs)
    itemsize = max((v.known.dtype.itemsize for v in inputs if v is not None), default=8)
    limit = min(FOLD_LIMIT_BYTES, max_memory or FOLD_LIMIT_BYTES)
    if count is not None and (count < 0 or count * itemsize > limit):
        raise NotEvaluated(
            f"{ONNX}: {where}: its result would hold {count} elements, over the "
            f"{limit} bytes that import-time folding allows"
        )
    canon = onnx.NodeProto()
    canon.CopyFrom(node)
    canon.name = ""
    canon.doc_string = ""
    del canon.input[:]
    del canon.output[:]
    canon.input.extend("" if v is None else f"i{k}" for k, v in enumerate(inputs))
    canon.output.extend(f"o{k}" for k in range(len(node.output)))
    feeds = {f"i{k}": v.known for k, v in enumerate(inputs) if v is not None}
    try:
        evaluator = _evaluator(canon.SerializeToString(), opset)
        with np.errstate(all="ignore"):
            results = evaluator.run(None, feeds)
    except ValidationError:
        raise
    except Exception as e:  # noqa: BLE001 - the reference ops raise whatever NumPy raises
        raise NotEvaluated(
            f"{ONNX}: {where}: cannot be evaluated at import: {type(e).__name__}: {e}"
        ) from None
    outputs: list[Value | None] = []
    for name, r in zip(node.output, results):
        outputs.append(const_value(np.asarray(r), where) if name else None)
    return outputs
