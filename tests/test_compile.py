"""compile_operator and CompiledOperator: validation first, input checks, caching, x64.

The lowering of an operator is replaced by a counting wrapper (through the registry, the only
place compile reaches operator code), so a test can prove that a rejected descriptor or a
rejected call never reached JAX tracing.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import registry
from dml_jax.compile import _compile_cached


def T(data_type, sizes, **kw):
    return dml.TensorDesc(data_type, sizes, **kw)


@pytest.fixture
def traced(monkeypatch):
    """Counts calls of every operator's lowering (each call is one trace).

    The compile cache is emptied before and after, so no operator compiled with the real
    lowering is returned inside the test, and none compiled with the counter leaks out.
    """
    calls = []
    _compile_cached.cache_clear()

    for spec in registry.operators():

        def counting(desc, *arrays, _lower=spec.lower):
            calls.append(desc.operator_type)
            return _lower(desc, *arrays)

        monkeypatch.setitem(
            registry._REGISTRY, spec.name, dataclasses.replace(spec, lower=counting)
        )
    yield calls
    _compile_cached.cache_clear()


X = T("FLOAT32", (3, 7, 5))
TILE_OK = dml.TileOperatorDesc(X, T("FLOAT32", (3, 14, 5)), (1, 2, 1))


INVALID = [
    (
        dml.TileOperatorDesc(X, T("FLOAT32", (3, 14, 6)), (1, 2, 1)),
        r"^DML_OPERATOR_TILE: OutputTensor\.Sizes\[2\] must equal 5, got 6",
    ),
    (
        dml.SplitOperatorDesc(X, [T("FLOAT32", (3, 3, 5)), T("FLOAT32", (3, 3, 5))], axis=1),
        r"^DML_OPERATOR_SPLIT: OutputTensors sizes along Axis 1 must sum to InputTensor\.Sizes",
    ),
    (
        dml.ReduceOperatorDesc("AVERAGE", T("INT32", (3, 7, 5)), T("INT32", (1, 7, 5)), [0]),
        r"^DML_OPERATOR_REDUCE with Function AVERAGE: InputTensor with data type INT32",
    ),
    (
        dml.ArgMaxOperatorDesc(X, T("FLOAT32", (3, 1, 5)), [1]),
        r"^DML_OPERATOR_ARGMAX: OutputTensor with data type FLOAT32",
    ),
    (
        dml.ElementWiseClipOperatorDesc(X, T("FLOAT32", (3, 7, 5), strides=(0, 5, 1)), 0.0, 1.0),
        r"^DML_OPERATOR_ELEMENT_WISE_CLIP: OutputTensor\.Strides \{0, 5, 1\} make output elements",
    ),
]


@pytest.mark.parametrize("desc, pattern", INVALID, ids=lambda v: getattr(v, "operator_type", ""))
def test_invalid_descriptor_raises_before_any_tracing(traced, desc, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(desc)
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.compile_operator(desc)
    assert traced == []


def test_feature_level_rejection_happens_before_tracing(traced):
    desc = dml.ArgMinOperatorDesc(X, T("UINT32", (3, 7, 1)), [2])
    with pytest.raises(dml.ValidationError, match=r"requires feature level 3_0 or later"):
        dml.compile_operator(desc, feature_level="2_1")
    assert traced == []


def test_compiling_traces_lazily_once_per_signature(traced):
    op = dml.compile_operator(TILE_OK)
    dml.validate(TILE_OK)
    assert traced == []  # validation and compile_operator are pure Python
    x = np.arange(105, dtype=np.float32).reshape(3, 7, 5)
    np.testing.assert_array_equal(op(x), np.tile(x, (1, 2, 1)))
    assert traced == ["DML_OPERATOR_TILE"]
    op(x + 1)
    assert traced == ["DML_OPERATOR_TILE"]  # jit cache: no second trace


def test_bad_calls_raise_before_tracing(traced):
    op = dml.compile_operator(TILE_OK)
    x = np.zeros((3, 7, 5), np.float32)
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_TILE: expected 1 input arrays "
        r"\(InputTensor\), got 2",
    ):
        op(x, x)
    with pytest.raises(dml.ValidationError, match=r"expected 1 input arrays .*got 0"):
        op()
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_TILE: InputTensor expects an "
        r"array of shape \(3, 7, 5\) \(its Sizes\), got "
        r"\(3, 5, 7\)",
    ):
        op(np.zeros((3, 5, 7), np.float32))
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_TILE: InputTensor expects dtype "
        r"float32 \(DataType FLOAT32\), got float16",
    ):
        op(jnp.zeros((3, 7, 5), jnp.float16))
    with pytest.raises(dml.ValidationError, match=r"expects dtype float32 .*got int32"):
        op(np.zeros((3, 7, 5), np.int32))
    assert traced == []


def test_jax_array_calls_take_the_direct_path_and_are_still_checked(traced):
    """Concrete JAX arrays skip the eager check; jit checks them when it traces."""
    op = dml.compile_operator(TILE_OK)
    x = jnp.arange(105, dtype=jnp.float32).reshape(3, 7, 5)
    op(x)  # first call: checked eagerly, then traced once
    for _ in range(3):
        np.testing.assert_array_equal(op(x + 1), np.tile(np.asarray(x + 1), (1, 2, 1)))
    assert traced == ["DML_OPERATOR_TILE"]  # the direct path reuses the one trace
    with pytest.raises(dml.ValidationError, match=r"InputTensor expects an array of shape"):
        op(jnp.zeros((3, 5, 7), jnp.float32))
    with pytest.raises(dml.ValidationError, match=r"expects dtype float32 .*got float16"):
        op(jnp.zeros((3, 7, 5), jnp.float16))
    with pytest.raises(dml.ValidationError, match=r"expected 1 input arrays .*got 2"):
        op(x, x)
    assert traced == ["DML_OPERATOR_TILE"]  # bad calls never reach the lowering
    # A float64 NumPy array is not silently narrowed to float32 by jit's canonicalization.
    with pytest.raises(dml.ValidationError, match=r"expects dtype float32 .*got float64"):
        op(np.zeros((3, 7, 5), np.float64))


def test_tensor_arrays_take_one_argument_per_tensor():
    a, b = T("INT16", (2, 3)), T("INT16", (2, 4))
    op = dml.compile_operator(dml.JoinOperatorDesc([a, b], T("INT16", (2, 7)), axis=1))
    assert op.input_paths == ("InputTensors[0]", "InputTensors[1]")
    assert op.input_descs == (a, b) and op.output_paths == ("OutputTensor",)
    xa, xb = np.ones((2, 3), np.int16), np.full((2, 4), 2, np.int16)
    np.testing.assert_array_equal(op(xa, xb), np.concatenate([xa, xb], axis=1))
    with pytest.raises(
        dml.ValidationError,
        match=r"expected 2 input arrays \(InputTensors\[0\], "
        r"InputTensors\[1\]\), got 1",
    ):
        op(xa)
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_JOIN: InputTensors\[1\] expects "
        r"an array of shape \(2, 4\)",
    ):
        op(xa, xa)


def test_python_lists_convert_only_when_exact():
    op = dml.compile_operator(
        dml.ElementWiseClipOperatorDesc(T("INT8", (3,)), T("INT8", (3,)), -2.0, 2.0)
    )
    np.testing.assert_array_equal(op([-5, 0, 5]), np.array([-2, 0, 2], np.int8))
    with pytest.raises(
        dml.ValidationError,
        match=r"^DML_OPERATOR_ELEMENT_WISE_CLIP: InputTensor "
        r"expects int8 values, got float64 data",
    ):
        op([0.5, 1.0, 2.0])
    with pytest.raises(dml.ValidationError, match=r"expects int8 values, got int64 data"):
        op([0, 1, 300])  # 300 does not fit INT8
    with pytest.raises(dml.ValidationError, match=r"expects an array of shape \(3,\)"):
        op([1, 2])


def test_split_returns_a_tuple_and_others_one_array():
    split = dml.compile_operator(dml.SplitOperatorDesc(T("UINT8", (4,)), [T("UINT8", (4,))], 0))
    out = split(np.arange(4, dtype=np.uint8))
    assert isinstance(out, tuple) and len(out) == 1
    clip = dml.compile_operator(
        dml.ElementWiseClipOperatorDesc(T("FLOAT32", (4,)), T("FLOAT32", (4,)), 0.0, 1.0)
    )
    assert not isinstance(clip(np.zeros(4, np.float32)), tuple)


# --- 64-bit types --------------------------------------------------------------------------------

DESC64 = dml.ElementWiseClipOperatorDesc(T("INT64", (3, 7, 5)), T("INT64", (3, 7, 5)), -1.0, 1.0)
ARG64 = dml.ArgMaxOperatorDesc(X, T("UINT64", (3, 7, 1)), [2])


@pytest.mark.parametrize("desc, path", [(DESC64, "InputTensor"), (ARG64, "OutputTensor")])
def test_64bit_types_without_x64_raise_naming_the_fix(traced, desc, path):
    with jax.enable_x64(False):
        with pytest.raises(
            dml.ValidationError,
            match=rf"^{desc.operator_type}: {path} has data "
            r"type [U]?INT64, which JAX computes only in "
            r"64-bit mode; .*jax_enable_x64",
        ):
            dml.compile_operator(desc)
        dml.validate(desc)  # the descriptor itself is valid: only the environment lacks x64
    assert traced == []


def test_call_path_is_a_plain_function_per_instance_and_keeps_the_class():
    op = dml.compile_operator(TILE_OK)
    assert isinstance(op, dml.CompiledOperator) and type(op).__name__ == "CompiledOperator"
    assert isinstance(type(op).__dict__["__call__"], staticmethod)  # no bound method per call
    x = jnp.arange(105, dtype=jnp.float32).reshape(3, 7, 5)
    np.testing.assert_array_equal(op(x), op.fn(x))
    np.testing.assert_array_equal(op.__call__(x), op.fn(x))
    # two inputs (the loop form): concrete arrays, NumPy arrays and a wrong count
    td = dml.TensorDesc("FLOAT32", (2, 3))
    join = dml.compile_operator(dml.JoinOperatorDesc([td, td], td.like(sizes=(4, 3)), axis=0))
    a, b = jnp.ones((2, 3)), jnp.zeros((2, 3))
    np.testing.assert_array_equal(join(a, b), np.concatenate([np.ones((2, 3)), np.zeros((2, 3))]))
    np.testing.assert_array_equal(join(np.asarray(a), b), join(a, b))
    with pytest.raises(dml.ValidationError, match=r"expected 2 input arrays .*got 1"):
        join(a)
    with pytest.raises(dml.ValidationError, match=r"expects dtype float32 .*got float64"):
        join(np.zeros((2, 3)), b)
    # a sharded copy (copy.copy of the operator) gets its own call with its own program
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    sharded = dml.compile_operator(TILE_OK, in_shardings=one)
    assert sharded is not op and type(sharded) is not type(op)
    assert sharded._jitted is not op._jitted
    np.testing.assert_array_equal(sharded(x), op(x))
    # every instance has its own call: two operators never share a program
    other = dml.compile_operator(dml.ElementWiseClip1OperatorDesc(td, td, min=0.0, max=0.5))
    assert type(other) is not type(join)
    np.testing.assert_array_equal(other(a), np.full((2, 3), 0.5, np.float32))


def test_64bit_types_with_x64_compile_and_run_and_still_check_at_call():
    with jax.enable_x64(True):
        op = dml.compile_operator(DESC64)
        x = np.arange(-52, 53, dtype=np.int64).reshape(3, 7, 5)
        got = op(x)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, np.clip(x, -1, 1))
    with jax.enable_x64(False), pytest.raises(dml.ValidationError, match=r"jax_enable_x64"):
        op(x)


# --- caching, hashing, feature levels ------------------------------------------------------------


def test_equal_descriptors_compile_to_the_same_object():
    a = dml.TileOperatorDesc(T("INT32", [2, 3]), T("INT32", [4, 3]), [2, 1], repeats_count=2)
    b = dml.TileOperatorDesc(
        T("DML_TENSOR_DATA_TYPE_INT32", (2, 3)),
        T(dml.DataType.INT32, np.array([4, 3])),
        (2, 1),
        repeats_count=np.int64(2),
    )
    assert a == b and hash(a) == hash(b) and a is not b
    assert isinstance(a.repeats, tuple) and isinstance(b.output_tensor.sizes, tuple)
    assert dml.compile_operator(a) is dml.compile_operator(b)
    assert dml.compile_operator(a) is not dml.compile_operator(a, feature_level="3_1")
    different = dml.TileOperatorDesc(T("INT32", [2, 3]), T("INT32", [4, 3]), [2, 1])
    assert different != a  # RepeatsCount given vs omitted are different descriptors


def test_descriptors_from_lists_and_tuples_are_equal_and_hashable():
    def build(seq):
        return dml.SplitOperatorDesc(
            T("FLOAT16", seq([1, 1, 6, 2])),
            seq([T("FLOAT16", seq([1, 1, 2, 2])), T("FLOAT16", seq([1, 1, 4, 2]))]),
            axis=2,
        )

    a, b = build(list), build(tuple)
    assert a == b and hash(a) == hash(b)
    assert isinstance(a.output_tensors, tuple) and isinstance(a.input_tensor.sizes, tuple)
    assert len({a, b}) == 1
    reduce_a = dml.ReduceOperatorDesc("SUM", T("FLOAT32", [2, 2]), T("FLOAT32", [1, 1]), [0, 1])
    reduce_b = dml.ReduceOperatorDesc("SUM", T("FLOAT32", (2, 2)), T("FLOAT32", (1, 1)), (0, 1))
    assert {reduce_a: 1}[reduce_b] == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.axis = 1


@pytest.mark.parametrize(
    "level",
    [dml.FeatureLevel.FL_3_1, "DML_FEATURE_LEVEL_3_1", "3_1", "FL_3_1"],
    ids=["member", "full", "suffix", "member-name"],
)
def test_feature_level_spellings(level):
    desc = dml.ElementWiseClipGradOperatorDesc(X, X, X, -1.0, 1.0)
    dml.validate(desc, feature_level=level)
    op = dml.compile_operator(desc, feature_level=level)
    assert op.feature_level is dml.FeatureLevel.FL_3_1
    assert op is dml.compile_operator(desc, feature_level=dml.FeatureLevel.FL_3_1)
    with pytest.raises(
        dml.ValidationError,
        match=r"requires feature level 3_1 or later; the "
        r"target is 3_0",
    ):
        dml.validate(desc, feature_level="3_0")


@pytest.mark.parametrize("level", ["3.1", "dml_feature_level_3_1", 0x3100, True, "7_0", ""])
def test_bad_feature_levels_are_rejected(level):
    with pytest.raises(dml.ValidationError, match=r"^feature_level must be a FeatureLevel"):
        dml.compile_operator(TILE_OK, feature_level=level)
    with pytest.raises(dml.ValidationError, match=r"^feature_level must be a FeatureLevel"):
        dml.validate(TILE_OK, feature_level=level)


def test_default_feature_level_is_the_newest():
    assert dml.compile_operator(TILE_OK).feature_level is max(dml.FeatureLevel)


@pytest.mark.parametrize("thing", [None, "DML_OPERATOR_TILE", {"type": "TILE"}, dml.TensorDesc])
def test_only_descriptors_compile(thing):
    with pytest.raises(dml.ValidationError, match=r"^expected an operator description"):
        dml.compile_operator(thing)


def test_fn_is_the_pure_function_behind_the_call():
    op = dml.compile_operator(TILE_OK)
    x = np.linspace(-1, 1, 105, dtype=np.float32).reshape(3, 7, 5)
    want = np.tile(x, (1, 2, 1))
    np.testing.assert_array_equal(op.fn(x), want)
    np.testing.assert_array_equal(jax.jit(op.fn)(x), want)
    assert op.desc is TILE_OK and op.output_descs == (TILE_OK.output_tensor,)
