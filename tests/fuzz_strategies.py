"""Hypothesis strategies for hostile inputs: descriptors with any value in any field.

Two kinds of values feed every field:
- *plausible* arguments: a valid descriptor on small shapes, built per operator from the rules in
  the spec (not from dml_jax's inference), then perturbed (a size off by one, another data type,
  another rank, a huge size) so that fuzzing reaches the deep validation rules and the lowering;
- *hostile* values: random nested structures of ints (negative, huge, bools), floats (NaN, inf),
  strings (enum names among them), None, NumPy scalars and arrays, lists, tuples and dicts.

``check_message`` states what every rejection must look like: a non-empty message that starts
with the operator type (or ``TensorDesc``/``ScaleBias``) and then names a DML field.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax.fields import ATTRIBUTE, COUNT, INPUT, OUTPUT

ENUMS = (
    dml.DataType,
    dml.TensorFlags,
    dml.FeatureLevel,
    dml.ReduceFunction,
    dml.DepthSpaceOrder,
    dml.AxisDirection,
)
ENUM_NAMES = sorted({m.name for e in ENUMS for m in e} | {m.dml_name for e in ENUMS for m in e})
DATA_TYPES = list(dml.DataType)
EDGE_INTS = [
    0,
    1,
    -1,
    2,
    3,
    4,
    8,
    9,
    2**16,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**32 + 1,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    2**64,
    -(2**63),
    10**30,
    10**400,
]
EDGE_FLOATS = [
    0.0,
    -0.0,
    0.5,
    -2.5,
    2.5,
    1e10,
    -1e10,
    3.5e38,
    65504.0,
    65520.0,
    1e308,
    math.inf,
    -math.inf,
    math.nan,
    5.0,
    -128.0,
    255.0,
]
NUMPY_SCALARS = [
    np.int64(3),
    np.uint8(2),
    np.int8(-1),
    np.uint64(2**64 - 1),
    np.float32("nan"),
    np.float16(2),
    np.float64(2.0),
    np.bool_(True),
    np.int32(-7),
    np.array([1, 2, 3]),
    np.array([[1, 2]]),
    np.array([], dtype=np.int64),
    np.array(4),
    np.array([1.5, 2.0]),
]

# Shapes stay tiny so that executed descriptors reuse few XLA compilations.
MAX_EXECUTED_ELEMENTS = 256


def scalars() -> st.SearchStrategy:
    """Any leaf value a careless or hostile caller may pass."""
    return st.one_of(
        st.sampled_from(EDGE_INTS),
        st.integers(-(2**70), 2**70),
        st.integers(-3, 10),
        st.booleans(),
        st.sampled_from(EDGE_FLOATS),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
        st.sampled_from(ENUM_NAMES),
        st.sampled_from([m for e in ENUMS for m in e]),
        st.none(),
        st.sampled_from(NUMPY_SCALARS),
        st.binary(max_size=4),
    )


def structures() -> st.SearchStrategy:
    """Random nested structures of ``scalars``: lists, tuples and dicts of anything."""
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=5),
            st.lists(inner, max_size=5).map(tuple),
            st.dictionaries(st.text(max_size=4), inner, max_size=3),
        ),
        max_leaves=10,
    )


@st.composite
def packed_sizes(draw, rank: int | None = None, low: int = 1, high: int = 3) -> tuple[int, ...]:
    rank = draw(st.integers(1, 4)) if rank is None else rank
    return tuple(draw(st.integers(low, high)) for _ in range(rank))


@st.composite
def layouts(draw, sizes: tuple[int, ...]) -> tuple[Any, Any]:
    """(strides, total_tensor_size_in_bytes) for sizes: packed, broadcast, padded or permuted."""
    kind = draw(st.sampled_from(["none", "none", "packed", "broadcast", "padded", "permuted"]))
    if kind == "none":
        return None, None
    strides, step = [], 1
    for n in reversed(sizes):
        strides.append(step)
        step *= n
    strides.reverse()
    if kind == "broadcast":
        strides = [0 if draw(st.booleans()) else s for s in strides]
    elif kind == "padded":
        strides = [s * 2 for s in strides]
    elif kind == "permuted" and len(sizes) > 1:
        order = draw(st.permutations(range(len(sizes))))
        strides, step = [0] * len(sizes), 1
        for d in reversed(order):
            strides[d] = step
            step *= sizes[d]
    total = None
    if draw(st.booleans()):
        total = draw(st.sampled_from([None, 0, 4096]))
    return tuple(strides), total


@st.composite
def tensor_descs(
    draw, sizes: tuple[int, ...] | None = None, data_type: dml.DataType | None = None
) -> dml.TensorDesc:
    """A valid TensorDesc (small, sometimes strided)."""
    sizes = draw(packed_sizes()) if sizes is None else sizes
    data_type = draw(st.sampled_from(DATA_TYPES)) if data_type is None else data_type
    strides, total = draw(layouts(sizes))
    if total == 0:
        total = None
    flags = draw(st.sampled_from(["NONE", "NONE", "NONE", "OWNED_BY_DML"]))
    align = draw(st.sampled_from([0, 0, 16, 32]))
    return dml.TensorDesc(data_type, sizes, strides, total, align, flags)


def tensor_desc_args() -> st.SearchStrategy:
    """Positional and keyword arguments for TensorDesc where any member may be anything."""

    def member(plausible: st.SearchStrategy) -> st.SearchStrategy:
        return st.one_of(plausible, plausible, structures())

    sizes = st.one_of(
        packed_sizes(),
        st.lists(st.sampled_from(EDGE_INTS), min_size=0, max_size=10),
        st.just([65535, 65537]),
        st.just([65536, 65536]),
        st.just([1] * 9),
        st.just([]),
    )
    return st.fixed_dictionaries(
        {
            "data_type": member(st.sampled_from(DATA_TYPES + ["FLOAT32", "UNKNOWN", "UINT4"])),
            "sizes": member(sizes),
        },
        optional={
            "strides": member(
                st.one_of(
                    st.none(),
                    packed_sizes(low=0, high=4),
                    st.lists(st.sampled_from(EDGE_INTS), max_size=4),
                )
            ),
            "total_tensor_size_in_bytes": member(
                st.sampled_from([None, 0, 4, 6, 2**64, 2**64 - 4, -4, 4.0])
            ),
            "guaranteed_base_offset_alignment": member(
                st.sampled_from([0, 3, 16, 2**31, -16, 2**32])
            ),
            "flags": member(
                st.sampled_from(["NONE", "OWNED_BY_DML", 1, "DML_TENSOR_FLAG_NONE", ["NONE"]])
            ),
        },
    )


@st.composite
def hostile_tensor_descs(draw) -> Any:
    """A TensorDesc built from random arguments, or the random value itself when rejected."""
    args = draw(tensor_desc_args())
    try:
        return dml.TensorDesc(**args)
    except dml.ValidationError:
        return draw(structures())


def hostile() -> st.SearchStrategy:
    """Any value at all for any field."""
    return st.one_of(
        structures(),
        structures(),
        tensor_descs(),
        hostile_tensor_descs(),
        st.lists(tensor_descs(), max_size=3),
        st.builds(dml.ScaleBias, st.floats(-4, 4), st.floats(-4, 4)),
    )


# --- Plausible arguments per operator, written from the spec's shape rules -------------------


def _like(t: dml.TensorDesc, sizes=None, data_type=None) -> dml.TensorDesc:
    return dml.TensorDesc(
        t.data_type if data_type is None else data_type, t.sizes if sizes is None else sizes
    )


@st.composite
def _split_join(draw, split: bool) -> dict:
    sizes = draw(packed_sizes(high=4))
    axis = draw(st.integers(0, len(sizes) - 1))
    cuts, left = [], sizes[axis]
    while left:
        piece = draw(st.integers(1, left))
        cuts.append(piece)
        left -= piece
    whole = draw(tensor_descs(sizes))
    pieces = [_like(whole, sizes[:axis] + (c,) + sizes[axis + 1 :]) for c in cuts]
    if split:
        return {
            "input_tensor": whole,
            "output_tensors": pieces,
            "axis": axis,
            "output_count": draw(st.sampled_from([None, len(pieces)])),
        }
    return {
        "input_tensors": pieces,
        "output_tensor": _like(whole),
        "axis": axis,
        "input_count": draw(st.sampled_from([None, len(pieces)])),
    }


@st.composite
def _depth_space(draw, to_space: bool, with_order: bool) -> dict:
    b = draw(st.integers(1, 2))
    n, c, h, w = draw(packed_sizes(rank=4, high=2))
    if to_space:
        x_sizes, y_sizes = (n, c * b * b, h, w), (n, c, h * b, w * b)
    else:
        x_sizes, y_sizes = (n, c, h * b, w * b), (n, c * b * b, h, w)
    x = draw(tensor_descs(x_sizes))
    args = {"input_tensor": x, "output_tensor": _like(x, y_sizes), "block_size": b}
    if with_order:
        args["order"] = draw(
            st.sampled_from(list(dml.DepthSpaceOrder) + ["DCR", "CRD", "COLUMN_ROW_DEPTH"])
        )
    return args


def _bound(draw, data_type: dml.DataType) -> Any:
    if data_type.is_float:
        return draw(st.one_of(st.floats(-8, 8), st.sampled_from(EDGE_FLOATS)))
    return draw(
        st.one_of(
            st.integers(-8, 8), st.sampled_from(EDGE_INTS), st.sampled_from([5.0, -2.5, 1e30])
        )
    )


@st.composite
def _clip(draw, grad: bool, typed: bool) -> dict:
    x = draw(tensor_descs())
    args = {"input_tensor": x}
    if grad:
        args["input_gradient_tensor"] = _like(x)
        args["output_gradient_tensor"] = _like(x)
    else:
        args["output_tensor"] = _like(x)
        if draw(st.booleans()):
            args["scale_bias"] = dml.ScaleBias(draw(st.floats(-2, 2)), draw(st.floats(-2, 2)))
    if typed:
        args["min"], args["max"] = _bound(draw, x.data_type), _bound(draw, x.data_type)
        args["min_max_data_type"] = draw(st.sampled_from([None, x.data_type, x.data_type.name]))
    else:
        args["min"] = draw(st.one_of(st.floats(-8, 8), st.sampled_from(EDGE_FLOATS)))
        args["max"] = draw(st.one_of(st.floats(-8, 8), st.sampled_from(EDGE_FLOATS)))
    return args


@st.composite
def _tile(draw) -> dict:
    x = draw(tensor_descs())
    repeats = tuple(draw(st.integers(1, 3)) for _ in x.sizes)
    y = _like(x, tuple(s * r for s, r in zip(x.sizes, repeats)))
    return {
        "input_tensor": x,
        "output_tensor": y,
        "repeats": repeats,
        "repeats_count": draw(st.sampled_from([None, len(repeats)])),
    }


INDEX_TYPES = [dml.DataType.UINT32, dml.DataType.INT32, dml.DataType.UINT64, dml.DataType.INT64]


@st.composite
def _reduce(draw, kind: str) -> dict:
    x = draw(tensor_descs())
    axes = draw(st.lists(st.integers(0, x.rank - 1), min_size=1, max_size=x.rank, unique=True))
    y_sizes = tuple(1 if d in axes else s for d, s in enumerate(x.sizes))
    args = {"input_tensor": x, "axes": axes, "axis_count": draw(st.sampled_from([None, len(axes)]))}
    if kind == "reduce":
        function = draw(st.sampled_from(list(dml.ReduceFunction)))
        args["function"] = function
        index = function in (dml.ReduceFunction.ARGMIN, dml.ReduceFunction.ARGMAX)
    else:
        index = True
        args["axis_direction"] = draw(st.sampled_from(list(dml.AxisDirection) + ["DECREASING"]))
    out_type = draw(st.sampled_from(INDEX_TYPES)) if index else x.data_type
    args["output_tensor"] = _like(x, y_sizes, out_type)
    return args


PLAUSIBLE = {
    dml.SplitOperatorDesc: lambda: _split_join(True),
    dml.JoinOperatorDesc: lambda: _split_join(False),
    dml.DepthToSpaceOperatorDesc: lambda: _depth_space(True, False),
    dml.DepthToSpace1OperatorDesc: lambda: _depth_space(True, True),
    dml.SpaceToDepthOperatorDesc: lambda: _depth_space(False, False),
    dml.SpaceToDepth1OperatorDesc: lambda: _depth_space(False, True),
    dml.ElementWiseClipOperatorDesc: lambda: _clip(False, False),
    dml.ElementWiseClip1OperatorDesc: lambda: _clip(False, True),
    dml.ElementWiseClipGradOperatorDesc: lambda: _clip(True, False),
    dml.ElementWiseClipGrad1OperatorDesc: lambda: _clip(True, True),
    dml.TileOperatorDesc: _tile,
    dml.ReduceOperatorDesc: lambda: _reduce("reduce"),
    dml.ArgMinOperatorDesc: lambda: _reduce("arg"),
    dml.ArgMaxOperatorDesc: lambda: _reduce("arg"),
}


@st.composite
def perturbed_tensor(draw, t: Any) -> Any:
    """A near miss of a TensorDesc: one size changed, another type or rank, a huge size."""
    if not isinstance(t, dml.TensorDesc):
        return draw(hostile())
    sizes = list(t.sizes)
    kind = draw(st.sampled_from(["size", "dtype", "rank", "huge", "strides", "any"]))
    try:
        if kind == "size":
            i = draw(st.integers(0, len(sizes) - 1))
            sizes[i] = max(1, sizes[i] + draw(st.sampled_from([-1, 1, 2])))
            return _like(t, tuple(sizes))
        if kind == "dtype":
            return _like(t, data_type=draw(st.sampled_from(DATA_TYPES)))
        if kind == "rank":
            new = draw(st.sampled_from([sizes[:-1], sizes + [1], [1] * 8 + sizes[:0], sizes * 2]))
            return _like(t, tuple(new) or (1,))
        if kind == "huge":
            i = draw(st.integers(0, len(sizes) - 1))
            sizes[i] = draw(st.sampled_from([2**16, 2**31, 2**32 - 1, 65537]))
            return _like(t, tuple(sizes))
        if kind == "strides":
            strides, total = draw(layouts(t.sizes))
            return dml.TensorDesc(t.data_type, t.sizes, strides, total or None)
    except dml.ValidationError:
        pass  # the near miss is not a TensorDesc itself (too many elements): use anything
    return draw(hostile())


@st.composite
def operator_args(draw, cls: type) -> dict:
    """Constructor keyword arguments for ``cls``: a valid set with some members replaced."""
    args = dict(draw(PLAUSIBLE[cls]()))
    names = [
        f.name
        for f in cls.declared(INPUT)
        + cls.declared(OUTPUT)
        + cls.declared(ATTRIBUTE)
        + cls.declared(COUNT)
    ]
    mode = draw(st.sampled_from(["valid", "near", "near", "hostile", "anything"]))
    if mode == "valid":
        return args
    for name in names:
        if mode == "anything":
            if draw(st.booleans()):
                args[name] = draw(hostile())
            continue
        if draw(st.integers(0, len(names))) != 0:
            continue
        value = args.get(name)
        if mode == "hostile":
            args[name] = draw(hostile())
        elif isinstance(value, dml.TensorDesc):
            args[name] = draw(perturbed_tensor(value))
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], dml.TensorDesc):
            items = list(value)
            action = draw(st.sampled_from(["perturb", "drop", "add", "empty"]))
            if action == "perturb":
                i = draw(st.integers(0, len(items) - 1))
                items[i] = draw(perturbed_tensor(items[i]))
            elif action == "drop":
                items.pop()
            elif action == "add":
                items.append(items[0])
            else:
                items = []
            args[name] = items
        elif isinstance(value, (list, tuple)):
            items = list(value)
            action = draw(st.sampled_from(["dup", "neg", "big", "empty", "extra"]))
            if action == "dup" and items:
                items.append(items[0])
            elif action == "neg" and items:
                items[0] = -1
            elif action == "big" and items:
                items[-1] = draw(st.sampled_from([8, 2**32, 2**32 - 1, 2**31]))
            elif action == "empty":
                items = []
            else:
                items.append(draw(st.integers(0, 9)))
            args[name] = items
        elif isinstance(value, int) and not isinstance(value, bool):
            args[name] = value + draw(st.sampled_from([-1, 1, 2**32, -(value + 1), 2**31]))
        else:
            args[name] = draw(hostile())
    return args


# --- What every rejection must look like ------------------------------------------------------

_PATH = r"[A-Z][A-Za-z]*(?:\[\d+\])?(?:\.[A-Z][A-Za-z]*(?:\[\d+\])?)*"


def check_message(error: BaseException, owner: str) -> str:
    """Asserts a ValidationError message is non-empty and names ``owner`` and a field.

    Accepted forms: ``<owner>: <DmlPath> ...``, ``<owner> with Function F: <DmlPath> ...``,
    ``<owner> requires feature level ...``, ``<owner>: expected N input arrays``, and messages
    about the ``feature_level`` argument.
    """
    message = str(error)
    assert message.strip(), f"empty message from {type(error).__name__}"
    assert isinstance(error, dml.ValidationError), f"{type(error).__name__}: {message}"
    if message.startswith("feature_level "):
        return message
    head = re.escape(owner)
    forms = (
        rf"^{head}(?: with Function \w+)?: {_PATH}\b",
        rf"^{head} requires feature level \w+",
        rf"^{head}: expected \d+ input arrays",
    )
    assert any(re.match(form, message) for form in forms), (
        f"message does not start with {owner!r} and a DML field path: {message[:300]!r}"
    )
    return message


def zeros_for(t: dml.TensorDesc) -> np.ndarray:
    return np.zeros(t.sizes, t.dtype)


def small_enough(descs) -> bool:
    return sum(math.prod(t.sizes) for t in descs) <= MAX_EXECUTED_ELEMENTS
