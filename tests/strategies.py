"""Hypothesis strategies for random VALID operator descriptions with matching inputs.

Every strategy draws a ``Case(desc, inputs)``: a description that passes ``dml.validate`` at the
newest feature level and one NumPy array per input tensor. Data types cover everything the support
tables (``dml_jax.support``) allow at the newest level, ranks 1 to 8 where the operator allows
them, and arrays stay small (at most ``MAX_ELEMENTS``) so CPU compiles stay cheap.

Cases with 64-bit tensors must run inside ``x64(case)`` (``jax.enable_x64``); the helpers at the end
(``run``, ``check_jit``, ``check_vmap``, ``check_grads``) do that themselves.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from jax.test_util import check_grads as jax_check_grads

import dml_jax as dml
from dml_jax import registry, support

MAX_ELEMENTS = 512
# XLA's CPU backend divides correctly rounded and adds in one fixed order; its GPU backend's
# division is approximate (within 2 ulps) and its scatter-adds run in any order
# (docs/semantics.md): tests that hold results to the bit on the CPU allow exactly that elsewhere.
ON_CPU = jax.default_backend() == "cpu"
NEWEST = dml.FeatureLevel.newest()
FLOATS = ("FLOAT16", "FLOAT32", "FLOAT64")
GRAD_TYPES = ("FLOAT32", "FLOAT64")  # FLOAT16 is too coarse for finite differences

# Transform checks (jit, vmap, grad) compile several functions per example: a third of the
# profile's examples keeps the ci profile fast while "thorough" still scales them up.
FEW = settings(max_examples=max(3, settings.default.max_examples // 3))
# Properties parametrized over many functions or classes: half the profile's examples each.
HALF = settings(max_examples=max(5, settings.default.max_examples // 2))


@dataclass(frozen=True)
class Case:
    desc: Any
    inputs: tuple

    def __repr__(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.inputs)
        return f"Case({self.desc!r}; inputs {shapes})"


def types_at_newest(key: Any, role: str = "inputs") -> list[str]:
    """Data type names a support-table key allows at the newest feature level, sorted."""
    row = support.row_at(registry.support_tables()[key], NEWEST)
    return sorted(t.name for t in getattr(row, role))


def ranks_at_newest(key: Any) -> tuple[int, ...]:
    return support.row_at(registry.support_tables()[key], NEWEST).ranks


def is_64bit(desc: Any) -> bool:
    tensors = desc.input_slots() + desc.output_slots()
    return any(t.data_type.is_64bit for _, t in tensors)


def x64(desc: Any):
    """``jax.enable_x64(True)`` for descriptions with 64-bit tensors, else a no-op context."""
    return jax.enable_x64(True) if is_64bit(desc) else contextlib.nullcontext()


# --- shapes and values ---------------------------------------------------------------------


@st.composite
def shapes(draw, ranks=tuple(range(1, 9)), max_elements: int = MAX_ELEMENTS, max_dim: int = 6):
    """A shape of one of ``ranks`` with at most ``max_elements`` elements."""
    rank = draw(st.sampled_from(tuple(ranks)))
    sizes, budget = [], max_elements
    for _ in range(rank):
        size = draw(st.integers(1, max(1, min(max_dim, budget))))
        sizes.append(size)
        budget //= size
    return tuple(sizes)


def values(rng: np.random.Generator, type_name: str, shape, style: str) -> np.ndarray:
    """Random values of a DML data type.

    Styles: ``full`` (the type's whole range for integers, spread floats), ``ties`` (a handful of
    small values, so equal elements are common), ``positive`` (> 0), ``near_one`` (|x| in
    [0.8, 1.25], for products), ``small`` (|x| <= 4, for exponentials).
    """
    dtype = np.dtype(type_name.lower())
    if style == "ties":
        pool = np.array([-2, -1, 0, 1, 2, 3], dtype=np.float64)
        if dtype.kind == "u":
            pool = pool[pool >= 0]
        return rng.choice(pool, size=shape).astype(dtype)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if style == "full":
            return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
        low = 1 if style in ("positive", "near_one") or dtype.kind == "u" else -4
        return rng.integers(low, 5, size=shape).astype(dtype)
    if style == "full":
        x = rng.standard_normal(shape) * 8
    elif style == "positive":
        x = rng.uniform(0.25, 4.0, shape)
    elif style == "near_one":
        x = rng.uniform(0.8, 1.25, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        x = rng.uniform(-4.0, 4.0, shape)
    return x.astype(dtype)


def seeds():
    return st.integers(0, 2**32 - 1).map(np.random.default_rng)


def _tensor(type_name: str, sizes) -> dml.TensorDesc:
    return dml.TensorDesc(type_name, list(sizes))


# --- SPLIT / JOIN --------------------------------------------------------------------------


@st.composite
def _pieces(draw, key: str, types=None):
    type_name = draw(st.sampled_from(types or types_at_newest(key)))
    shape = draw(shapes(ranks_at_newest(key)))
    axis = draw(st.integers(0, len(shape) - 1))
    n = shape[axis]
    cuts = draw(st.sets(st.integers(1, n - 1), max_size=3)) if n > 1 else set()
    edges = [0, *sorted(cuts), n]
    widths = [b - a for a, b in itertools.pairwise(edges)]
    parts = [shape[:axis] + (w,) + shape[axis + 1 :] for w in widths]
    return type_name, shape, axis, parts


@st.composite
def split_cases(draw, types=None):
    type_name, shape, axis, parts = draw(_pieces("DML_OPERATOR_SPLIT", types))
    desc = dml.SplitOperatorDesc(
        _tensor(type_name, shape),
        [_tensor(type_name, p) for p in parts],
        axis=axis,
        output_count=draw(st.sampled_from([None, len(parts)])),
    )
    x = values(draw(seeds()), type_name, shape, draw(st.sampled_from(["full", "ties"])))
    return Case(desc, (x,))


@st.composite
def join_cases(draw, types=None):
    type_name, shape, axis, parts = draw(_pieces("DML_OPERATOR_JOIN", types))
    desc = dml.JoinOperatorDesc(
        [_tensor(type_name, p) for p in parts],
        _tensor(type_name, shape),
        axis=axis,
        input_count=draw(st.sampled_from([None, len(parts)])),
    )
    rng = draw(seeds())
    return Case(desc, tuple(values(rng, type_name, p, "full") for p in parts))


# --- DEPTH_TO_SPACE(1) / SPACE_TO_DEPTH(1) -------------------------------------------------

DEPTH_SPACE_CLASSES = (
    dml.DepthToSpaceOperatorDesc,
    dml.DepthToSpace1OperatorDesc,
    dml.SpaceToDepthOperatorDesc,
    dml.SpaceToDepth1OperatorDesc,
)
ORDERS = ("DEPTH_COLUMN_ROW", "COLUMN_ROW_DEPTH")


@st.composite
def depth_space_cases(draw, cls=None, types=None, order=None):
    """A 4-D case for one of the four classes (random when ``cls`` is None)."""
    cls = cls or draw(st.sampled_from(DEPTH_SPACE_CLASSES))
    type_name = draw(st.sampled_from(types or types_at_newest(cls.operator_type)))
    b = draw(st.integers(1, 3))
    n, c, h, w = (draw(st.integers(1, k)) for k in (2, 3, 3, 3))
    depth = (n, c * b * b, h, w)
    space = (n, c, h * b, w * b)
    to_space = cls.operator_type.startswith("DML_OPERATOR_DEPTH_TO_SPACE")
    x_shape, y_shape = (depth, space) if to_space else (space, depth)
    extra = {}
    if cls.operator_type.endswith("1"):
        extra["order"] = order or draw(st.sampled_from(ORDERS))
    desc = cls(_tensor(type_name, x_shape), _tensor(type_name, y_shape), block_size=b, **extra)
    return Case(desc, (values(draw(seeds()), type_name, x_shape, "full"),))


# --- TILE ----------------------------------------------------------------------------------


@st.composite
def tile_cases(draw, types=None):
    key = "DML_OPERATOR_TILE"
    type_name = draw(st.sampled_from(types or types_at_newest(key)))
    shape = draw(shapes(ranks_at_newest(key), max_elements=64, max_dim=4))
    repeats, budget = [], MAX_ELEMENTS // math.prod(shape)
    for _ in shape:
        r = draw(st.integers(1, max(1, min(3, budget))))
        repeats.append(r)
        budget //= r
    out = tuple(s * r for s, r in zip(shape, repeats))
    desc = dml.TileOperatorDesc(
        _tensor(type_name, shape),
        _tensor(type_name, out),
        repeats=repeats,
        repeats_count=draw(st.sampled_from([None, len(repeats)])),
    )
    return Case(desc, (values(draw(seeds()), type_name, shape, "full"),))


# --- CLIP family ---------------------------------------------------------------------------

CLIP_CLASSES = (
    dml.ElementWiseClipOperatorDesc,
    dml.ElementWiseClip1OperatorDesc,
    dml.ElementWiseClipGradOperatorDesc,
    dml.ElementWiseClipGrad1OperatorDesc,
)


def _float_bound(draw) -> float:
    """A DML FLOAT bound: halves and fractions (conversion rules), now and then out of range."""
    return draw(
        st.one_of(
            st.integers(-8, 8).map(lambda k: k / 2),
            st.floats(-6, 6, allow_nan=False, width=32),
            st.sampled_from([-1e10, 1e10, -70000.0, 70000.0, 2.7, -2.5, 0.1, -float("inf")]),
        )
    )


def _typed_bound(draw, type_name: str):
    """A CLIP1 bound that ``type_name`` holds exactly (integers) or rounds (floats)."""
    dtype = np.dtype(type_name.lower())
    if dtype.kind == "f":
        return draw(
            st.one_of(
                st.integers(-8, 8).map(lambda k: k / 2), st.floats(-6, 6, allow_nan=False, width=16)
            )
        )
    info = np.iinfo(dtype)
    return draw(
        st.one_of(
            st.integers(max(int(info.min), -6), 6),
            st.sampled_from([int(info.min), int(info.max)]),
            st.integers(int(info.min), int(info.max)),
        )
    )


@st.composite
def clip_cases(draw, cls=None, types=None, scale_bias: bool | None = None):
    """CLIP, CLIP1, CLIP_GRAD or CLIP_GRAD1 (random when ``cls`` is None)."""
    cls = cls or draw(st.sampled_from(CLIP_CLASSES))
    type_name = draw(st.sampled_from(types or types_at_newest(cls.operator_type)))
    shape = draw(shapes(ranks_at_newest(cls.operator_type), max_elements=128))
    t = _tensor(type_name, shape)
    typed = cls.operator_type.endswith("1")
    if typed:
        lo, hi = _typed_bound(draw, type_name), _typed_bound(draw, type_name)
        extra = {"min_max_data_type": draw(st.sampled_from([None, type_name]))}
    else:
        lo, hi = _float_bound(draw), _float_bound(draw)
        extra = {}
    if draw(st.booleans()):  # mostly Min <= Max, but Min > Max is kept half the time
        lo, hi = min(lo, hi), max(lo, hi)
    rng = draw(seeds())
    style = draw(st.sampled_from(["full", "ties", "small"]))
    x = values(rng, type_name, shape, style)
    if "GRAD" in cls.operator_type:
        desc = cls(t, t, t, min=lo, max=hi, **extra)
        return Case(desc, (x, values(rng, type_name, shape, "full")))
    use_sb = draw(st.booleans()) if scale_bias is None else scale_bias
    if use_sb and type_name in FLOATS:
        extra["scale_bias"] = dml.ScaleBias(
            draw(st.sampled_from([-2.0, -0.5, 0.5, 1.0, 1.5, 3.0])),
            draw(st.sampled_from([-1.0, 0.0, 0.25, 2.0])),
        )
    return Case(cls(t, t, min=lo, max=hi, **extra), (x,))


# --- REDUCE / ARGMIN / ARGMAX --------------------------------------------------------------

REDUCE_FUNCTIONS = tuple(f.name for f in dml.ReduceFunction)
# Input styles per function: LOG_SUM needs a positive sum, products stay near one, exponentials
# small; integers use their full range so that wrap-around is exercised.
_STYLES = {
    "LOG_SUM": ("positive",),
    "MULTIPLY": ("near_one", "ties"),
    "LOG_SUM_EXP": ("small", "ties"),
}


def reduce_input(rng, function: str, type_name: str, shape, style=None) -> np.ndarray:
    if style is None:
        pool = _STYLES.get(function, ("full", "ties", "small"))
        style = pool[int(rng.integers(len(pool)))]
    if function == "MULTIPLY" and np.dtype(type_name.lower()).kind in "iu":
        style = rng.choice(["full", "ties"])  # products of full-range integers wrap around
    return values(rng, type_name, shape, str(style))


@st.composite
def _axes(draw, rank: int):
    axes = draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank, unique=True))
    return axes  # order left as drawn: it must not matter


@st.composite
def reduce_cases(draw, functions=REDUCE_FUNCTIONS, types=None, max_elements: int = 256):
    function = draw(st.sampled_from(tuple(functions)))
    key = ("DML_OPERATOR_REDUCE", function)
    type_name = draw(st.sampled_from(types or types_at_newest(key)))
    shape = draw(shapes(ranks_at_newest(key), max_elements=max_elements))
    axes = draw(_axes(len(shape)))
    out_sizes = tuple(1 if d in axes else s for d, s in enumerate(shape))
    out_type = type_name
    if function in ("ARGMIN", "ARGMAX"):
        out_type = draw(st.sampled_from(types_at_newest(key, "outputs")))
    desc = dml.ReduceOperatorDesc(
        function,
        _tensor(type_name, shape),
        _tensor(out_type, out_sizes),
        axes=axes,
        axis_count=draw(st.sampled_from([None, len(axes)])),
    )
    return Case(desc, (reduce_input(draw(seeds()), function, type_name, shape),))


@st.composite
def arg_cases(draw, cls=None, types=None):
    cls = cls or draw(st.sampled_from([dml.ArgMinOperatorDesc, dml.ArgMaxOperatorDesc]))
    key = cls.operator_type
    type_name = draw(st.sampled_from(types or types_at_newest(key)))
    shape = draw(shapes(ranks_at_newest(key), max_elements=256))
    axes = draw(_axes(len(shape)))
    out_sizes = tuple(1 if d in axes else s for d, s in enumerate(shape))
    desc = cls(
        _tensor(type_name, shape),
        _tensor(draw(st.sampled_from(types_at_newest(key, "outputs"))), out_sizes),
        axes=axes,
        axis_direction=draw(st.sampled_from(["INCREASING", "DECREASING"])),
    )
    style = draw(st.sampled_from(["full", "ties"]))
    return Case(desc, (values(draw(seeds()), type_name, shape, style),))


# --- running and transform helpers ---------------------------------------------------------


def as_tuple(result: Any) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def run(case: Case) -> tuple[np.ndarray, ...]:
    """Compiles (validating first) and runs the jitted operator; NumPy results as a tuple."""
    with x64(case.desc):
        op = dml.compile_operator(case.desc)
        return tuple(np.asarray(r) for r in as_tuple(op(*case.inputs)))


def assert_same(got, want, exact: bool = True, **tolerance) -> None:
    for g, w in zip(as_tuple(got), as_tuple(want), strict=True):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if exact:
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), **tolerance)


def same_program_tolerance(case: Case) -> dict:
    """check_jit / check_vmap arguments for element-wise float math: fused into one kernel, XLA
    may contract ``a * x + b`` into one FMA (one rounding instead of two), so eager and jit may
    differ in the last bit. Integers stay exact."""
    dtype = case.inputs[0].dtype
    if not np.issubdtype(dtype, np.floating):
        return {"exact": True}
    return {"exact": False, "rtol": 1e-3 if dtype == np.float16 else 1e-6, "atol": 1e-7}


_EAGER_CHECKED: set[tuple[str, str]] = set()  # (test node, operator type) compared so far


def check_jit(case: Case, exact: bool = True, **tolerance) -> None:
    """Eager ``op.fn`` equals ``jax.jit(op.fn)``, on the first case of each operator type that a
    test node (each parametrization) draws; its later cases of that type return at once.

    Eager dispatch compiles every primitive of the lowering apart, again for each new shape: over
    every example it was about 40% of these tests' time on two cores. The first case of a type
    runs that lowering's Python on concrete arrays, which is what eager can break; later cases
    would test XLA's consistency rather than the lowering (their values are the reference tests'
    business).
    """
    node = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if node:
        key = (node, case.desc.operator_type)
        if key in _EAGER_CHECKED:
            return
        _EAGER_CHECKED.add(key)
    with x64(case.desc):
        op = dml.compile_operator(case.desc)
        args = [jnp.asarray(a) for a in case.inputs]
        assert_same(jax.jit(op.fn)(*args), op.fn(*args), exact, **tolerance)


def batch_of(case: Case, size: int = 3) -> list[tuple[np.ndarray, ...]]:
    """``size`` input tuples of the case's shapes: the case's own, then shuffled copies."""
    rng = np.random.default_rng(len(case.inputs[0].ravel()))
    batch = [case.inputs]
    for _ in range(size - 1):
        batch.append(tuple(rng.permutation(a.ravel()).reshape(a.shape) for a in case.inputs))
    return batch


def check_vmap(case: Case, exact: bool = True, **tolerance) -> None:
    """``jax.vmap(op.fn)`` over a batch equals stacking ``op.fn`` applied item by item."""
    with x64(case.desc):
        op = dml.compile_operator(case.desc)
        batch = batch_of(case)
        stacked = [jnp.asarray(np.stack(column)) for column in zip(*batch)]
        # Both sides jitted (one compile each); eager == jit is check_jit's business.
        mapped = as_tuple(jax.jit(jax.vmap(op.fn))(*stacked))
        single = jax.jit(op.fn)
        loops = [as_tuple(single(*(jnp.asarray(a) for a in item))) for item in batch]
        want = tuple(np.stack([np.asarray(r[i]) for r in loops]) for i in range(len(mapped)))
        assert_same(mapped, want, exact, **tolerance)


def check_grads(case: Case, argnums: tuple[int, ...] | None = None, **tolerance) -> None:
    """``jax.test_util.check_grads`` (order 1, fwd and rev) on the operator's float inputs."""
    with x64(case.desc):
        op = dml.compile_operator(case.desc)
        assert op.differentiable
        args = tuple(jnp.asarray(a) for a in case.inputs)
        argnums = tuple(range(len(args))) if argnums is None else argnums

        def f(*diff_args):
            full = list(args)
            for i, a in zip(argnums, diff_args):
                full[i] = a
            return op.fn(*full)

        diff_args = tuple(args[i] for i in argnums)
        outputs = [t.dtype for _, t in case.desc.output_slots()]
        # Central differences with float32 inputs or outputs need a larger step than the
        # default 1e-4 to rise above rounding noise (CAST FLOAT64 -> FLOAT32 rounds the
        # differences); float64 throughout keeps the default.
        if any(a.dtype == jnp.float32 for a in diff_args) or np.dtype("float32") in outputs:
            tolerance.setdefault("eps", 1e-2)
            # ... and the quotient carries float32's rounding, also where the outputs are
            # float64 (CAST FLOAT32 -> FLOAT64), whose default tolerance is 1e-5.
            for key in ("atol", "rtol"):
                tolerance.setdefault(key, {np.dtype(np.float64): 2e-3})
        # jit keeps the many evaluations check_grads makes from dispatching op by op.
        jax_check_grads(jax.jit(f), diff_args, order=1, modes=("fwd", "rev"), **tolerance)


def with_type(strategy_fn: Callable, types) -> Any:
    """``strategy_fn(types=types)``: restricts a case strategy to some data types."""
    return strategy_fn(types=list(types))


def rule_factory(cls: type, **defaults: Any) -> Callable[..., Callable[[], Any]]:
    """Rule rows (``INVALID_ROWS``): ``rule_factory(cls, **defaults)(**changes)`` is a factory
    that builds ``cls`` from the defaults with ``changes`` over them. Each call builds afresh
    and leaves both untouched (the registry test calls every row's factory too)."""

    def with_changes(**changes: Any) -> Callable[[], Any]:
        return lambda: cls(**{**defaults, **changes})

    return with_changes
