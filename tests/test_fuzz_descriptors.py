"""Fuzzing of descriptors: any field may hold any value, and the only exception allowed is
``ValidationError`` whose message names the operator and a DML field.

Some descriptors that pass validation (small shapes only) are compiled and executed with data
whose expected result is computed independently in NumPy (data movement operators), or whose
shapes and dtypes are checked (the rest). ``DML_JAX_FUZZ_EXAMPLES=N`` raises the example count
of every test here (the long run recorded in ``tests/FUZZING.md``); ``DML_JAX_FUZZ_REPORT=path`` writes the
counts of descriptors tried, rejected and executed as JSON.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
from collections import Counter

import jax
import numpy as np
import pytest
from fuzz_strategies import (
    ENUM_NAMES,
    check_message,
    hostile,
    operator_args,
    small_enough,
    structures,
    tensor_desc_args,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax.fields import dml_member_name

OPERATORS = [
    dml.SplitOperatorDesc,
    dml.JoinOperatorDesc,
    dml.DepthToSpaceOperatorDesc,
    dml.DepthToSpace1OperatorDesc,
    dml.SpaceToDepthOperatorDesc,
    dml.SpaceToDepth1OperatorDesc,
    dml.ElementWiseClipOperatorDesc,
    dml.ElementWiseClip1OperatorDesc,
    dml.ElementWiseClipGradOperatorDesc,
    dml.ElementWiseClipGrad1OperatorDesc,
    dml.TileOperatorDesc,
    dml.ReduceOperatorDesc,
    dml.ArgMinOperatorDesc,
    dml.ArgMaxOperatorDesc,
]

STATS: Counter = Counter()


def fuzz_settings():
    """The profile's example count, or ``DML_JAX_FUZZ_EXAMPLES`` for the long run."""
    count = os.environ.get("DML_JAX_FUZZ_EXAMPLES")
    return settings(max_examples=int(count)) if count else settings()


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    path = os.environ.get("DML_JAX_FUZZ_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(dict(sorted(STATS.items())), f, indent=1)


def test_fuzzed_operators_are_public():
    """Hand-written fuzzers for the first operators; every registered operator is also fuzzed
    from its field declarations (test_examples.py)."""
    public = {getattr(dml, n) for n in dml.__all__ if n.endswith("OperatorDesc")}
    assert set(OPERATORS) <= public


# --- Independent expectations for executed descriptors ------------------------------------------


def _expected(desc, inputs: list[np.ndarray]) -> list[np.ndarray] | None:
    """NumPy results for the data movement operators, from the spec's index formulas."""
    name = desc.operator_type
    if name == "DML_OPERATOR_SPLIT":
        cuts = np.cumsum([t.sizes[desc.axis] for t in desc.output_tensors])[:-1]
        return np.split(inputs[0], cuts, axis=desc.axis)
    if name == "DML_OPERATOR_JOIN":
        return [np.concatenate(inputs, axis=desc.axis)]
    if name == "DML_OPERATOR_TILE":
        return [np.tile(inputs[0], desc.repeats)]
    if "DEPTH" in name:
        x, b = inputs[0], desc.block_size
        crd = getattr(desc, "order", None) is dml.DepthSpaceOrder.COLUMN_ROW_DEPTH
        n, c, h, w = x.shape
        if "DEPTH_TO_SPACE" in name:
            co = c // (b * b)
            out = np.empty((n, co, h * b, w * b), x.dtype)
            for i in range(b):
                for j in range(b):
                    for k in range(co):
                        src = k * b * b + i * b + j if crd else (i * b + j) * co + k
                        out[:, k, i::b, j::b] = x[:, src]
            return [out]
        out = np.empty((n, c * b * b, h // b, w // b), x.dtype)
        for i in range(b):
            for j in range(b):
                for k in range(c):
                    dst = k * b * b + i * b + j if crd else (i * b + j) * c + k
                    out[:, dst] = x[:, k, i::b, j::b]
        return [out]
    return None


def _inputs_for(op) -> list[np.ndarray]:
    arrays = []
    for t in op.input_descs:
        n = math.prod(t.sizes)
        values = (np.arange(n) % 100) - (0 if t.data_type.name.startswith("UINT") else 50)
        arrays.append(values.astype(t.dtype).reshape(t.sizes))
    return arrays


def _execute(desc, level) -> None:
    tensors = desc.input_slots() + desc.output_slots()
    wide = any(t.data_type.is_64bit for _, t in tensors)
    op = dml.compile_operator(desc, level)
    inputs = _inputs_for(op)
    with jax.enable_x64(True) if wide else contextlib.nullcontext():
        result = op(*inputs)
    results = result if isinstance(result, tuple) else (result,)
    assert len(results) == len(op.output_descs)
    for r, t in zip(results, op.output_descs):
        assert tuple(r.shape) == t.sizes and np.dtype(r.dtype) == t.dtype
    expected = _expected(desc, inputs)
    if expected is not None:
        for r, e in zip(results, expected):
            np.testing.assert_array_equal(np.asarray(r), e)
    if importlib.util.find_spec("dml_jax.buffers") is not None:
        buffers = [np.zeros(t.addressed_elements, t.dtype) for t in op.input_descs]
        outs = [np.zeros(t.addressed_elements, t.dtype) for t in op.output_descs]
        with jax.enable_x64(True) if wide else contextlib.nullcontext():
            new = op.run_buffers(buffers, outs)
        assert len(new) == len(outs)


def exercise(cls: type, args: dict, level=None, run: bool = True) -> str:
    """Constructs, validates and (when valid, small and ``run``) executes one descriptor.

    Returns the outcome: ``rejected``, ``valid-large``, ``valid`` or ``executed``. Any exception
    other than a well-formed ValidationError fails the test.
    """
    try:
        desc = cls(**args)
        dml.validate(desc, level)
    except dml.ValidationError as e:
        check_message(e, cls.operator_type)
        return "rejected"
    tensors = desc.input_slots() + desc.output_slots()
    assert all(isinstance(t, dml.TensorDesc) for _, t in tensors)
    hash(desc)
    if not small_enough([t for _, t in tensors]):
        return "valid-large"
    if not run:
        return "valid"
    wide = any(t.data_type.is_64bit for _, t in tensors)
    if wide and not jax.config.read("jax_enable_x64"):
        # Without 64-bit mode the compile (or the call) must say how to enable it.
        with pytest.raises(dml.ValidationError, match="jax_enable_x64") as info:
            op = dml.compile_operator(desc, level)
            op(*_inputs_for(op))
        check_message(info.value, cls.operator_type)
        with jax.enable_x64(True):
            _execute(desc, level)
    else:
        _execute(desc, level)
    return "executed"


# Executing costs an XLA compilation (~0.3 s here); validation is the target, so only one valid
# descriptor in EXECUTE_ONE_IN is executed (CI: 3; the long run sets 30).
EXECUTE_ONE_IN = int(os.environ.get("DML_JAX_FUZZ_EXECUTE_ONE_IN", "3"))

LEVELS = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.sampled_from(list(dml.FeatureLevel)),
    st.sampled_from(["5_0", "DML_FEATURE_LEVEL_3_0", "FL_2_1"]),
    hostile(),
)


@pytest.mark.parametrize("cls", OPERATORS, ids=lambda c: c.operator_type[13:])
@fuzz_settings()
@given(data=st.data())
def test_operator_fuzz(cls, data):
    args = data.draw(operator_args(cls), label="args")
    level = data.draw(LEVELS, label="feature_level")
    run = data.draw(st.integers(0, EXECUTE_ONE_IN - 1), label="execute") == 0
    try:
        outcome = exercise(cls, args, level, run)
    except dml.ValidationError as e:
        if not str(e).startswith("feature_level "):
            raise
        outcome = "rejected"
    STATS[f"{cls.operator_type} {outcome}"] += 1
    STATS["descriptors"] += 1


@fuzz_settings()
@given(args=tensor_desc_args())
def test_tensor_desc_fuzz(args):
    STATS["tensor descs"] += 1
    try:
        t = dml.TensorDesc(**args)
    except dml.ValidationError as e:
        message = str(e)
        assert message.startswith("TensorDesc.") and len(message) > len("TensorDesc.x "), message
        return
    # What is accepted satisfies DML's rules.
    assert 1 <= t.rank <= 8 and all(isinstance(s, int) and 1 <= s < 2**32 for s in t.sizes)
    assert math.prod(t.sizes) < 2**32 and t.addressed_elements < 2**32
    assert t.total_tensor_size_in_bytes % 4 == 0
    assert t.total_tensor_size_in_bytes >= t.addressed_elements * t.data_type.size
    assert t.total_tensor_size_in_bytes < 2**64
    hash(t)


@fuzz_settings()
@given(scale=hostile(), bias=hostile())
def test_scale_bias_fuzz(scale, bias):
    try:
        sb = dml.ScaleBias(scale, bias)
    except dml.ValidationError as e:
        assert str(e).startswith(("ScaleBias.Scale ", "ScaleBias.Bias ")), str(e)
        return
    assert math.isfinite(sb.scale) and math.isfinite(sb.bias)


@fuzz_settings()
@given(value=hostile(), which=st.sampled_from(["validate", "compile"]))
def test_non_descriptors_are_rejected(value, which):
    with pytest.raises(dml.ValidationError) as info:
        (dml.validate if which == "validate" else dml.compile_operator)(value)
    assert str(info.value).strip()


# --- operator_desc_from_json -----------------------------------------------------------------


def _tensor_json(t: dml.TensorDesc) -> dict:
    obj = {"DataType": t.data_type.name, "Sizes": list(t.sizes)}
    if t.strides is not None:
        obj["Strides"] = list(t.strides)
    if t.flags is not dml.TensorFlags.NONE:
        obj["Flags"] = t.flags.name
    return obj


def _json_value(value):
    if isinstance(value, dml.TensorDesc):
        return _tensor_json(value)
    if isinstance(value, dml.ScaleBias):
        return {"Scale": value.scale, "Bias": value.bias}
    if hasattr(value, "name") and hasattr(value, "value"):  # an enum member
        return value.name
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    return value


@st.composite
def json_descs(draw) -> dict:
    """A dispatchable object built from plausible args, then mutated at JSON level."""
    cls = draw(st.sampled_from(OPERATORS))
    args = draw(operator_args(cls))
    desc = {}
    for name, value in args.items():
        if value is None and name.endswith("count"):
            continue
        desc[dml_member_name(name)] = _json_value(value)
    for array, count in (
        ("OutputTensors", "OutputCount"),
        ("InputTensors", "InputCount"),
        ("Axes", "AxisCount"),
        ("Repeats", "RepeatsCount"),
    ):
        if isinstance(desc.get(array), list) and count not in desc:
            desc[count] = len(desc[array])
    obj = {"type": draw(st.sampled_from([cls.operator_type, cls.operator_type[13:]])), "desc": desc}
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(desc) + ["Bogus"]))
        action = draw(st.sampled_from(["delete", "replace", "nest"]))
        if action == "delete":
            desc.pop(key, None)
        elif action == "replace":
            desc[key] = draw(st.one_of(structures(), st.sampled_from(ENUM_NAMES)))
        elif isinstance(desc.get(key), dict) and desc[key]:
            inner = desc[key]
            inner[draw(st.sampled_from(sorted(inner)))] = draw(structures())
    if draw(st.integers(0, 9)) == 0:
        obj = draw(
            st.sampled_from(
                [
                    {"type": obj["type"], "Desc": desc},
                    {"desc": desc},
                    {"type": draw(structures()), "desc": desc},
                ]
            )
        )
    return obj


def _json_safe(value):
    """Random structures made JSON-like: dict keys strings, no bytes or NumPy values."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (bytes, np.ndarray, np.generic)):
        return repr(value)
    if hasattr(value, "name") and hasattr(value, "value"):
        return value.name
    return value


@fuzz_settings()
@given(obj=st.one_of(json_descs(), json_descs(), structures().map(_json_safe)))
def test_operator_desc_from_json_fuzz(obj):
    from_json = dml.operator_desc_from_json
    STATS["json descs"] += 1
    try:
        desc = from_json(obj)
        dml.validate(desc)
    except dml.ValidationError as e:
        assert str(e).strip()
        return
    STATS["json descs valid"] += 1
    assert desc.operator_type.startswith("DML_OPERATOR_")
