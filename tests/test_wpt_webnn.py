"""W3C web-platform-tests WebNN conformance cases, mapped onto DirectML descriptors.

The cases are third-party data kept outside the project (../shared/conformance/wpt_webnn, see
its README.md); the module skips when they are absent. Each WebNN operator maps onto DirectML as
ONNX-on-DirectML and WebNN-on-DirectML implementations do:

- slice(input, starts, sizes, {strides}) -> SLICE1 with InputWindowOffsets = starts,
  InputWindowSizes = sizes, InputWindowStrides = strides (default 1); the output holds
  ``ceil(size / stride)`` elements per dimension.
- transpose(input, {permutation}) -> ELEMENT_WISE_IDENTITY whose InputTensor has the permuted
  sizes and the permuted (packed) strides of the input buffer; the default permutation reverses
  the dimensions.
- expand(input, newShape) -> ELEMENT_WISE_IDENTITY whose InputTensor has the new sizes and
  stride 0 on every broadcast dimension (the input right-aligned to the new rank).
- reshape(input, newShape) -> ELEMENT_WISE_IDENTITY whose InputTensor reads the same buffer with
  the new sizes only.

The identity cases run in buffer mode (``run_buffers``), where the tensor-desc strides act on
the bound buffer, exactly as DirectML reads it. A 0-D tensor has sizes [1] (DirectML has no
rank 0). float16 input data is rounded to float16 first, as the WPT harness does. Every case is
checked with the WPT tolerance of its operator (ULP distance in the output type; 0 for all four).
"""

from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

import dml_jax as dml
from dml_jax.tensor import packed_strides

WPT = pathlib.Path(__file__).resolve().parents[2] / "shared/conformance/wpt_webnn"
if not WPT.is_dir():
    pytest.skip("the WPT WebNN cases are not beside this checkout", allow_module_level=True)

T = dml.TensorDesc
# WebNN operator -> (file, ULP tolerance): README.md's "Tolerance" section.
FILES = {"slice": 0, "transpose": 0, "expand": 0, "reshape": 0}


def _cases() -> list[tuple[str, dict]]:
    out = []
    for name in FILES:
        for case in json.loads((WPT / f"{name}.json").read_text())["tests"]:
            out.append((name, case))
    return out


CASES = _cases()


def _array(entry: dict) -> np.ndarray:
    """A WPT tensor as NumPy: data in the descriptor's type and shape (0-D as [1])."""
    desc = entry["descriptor"]
    dtype = np.dtype(desc["dataType"])
    data = entry["data"]
    data = data if isinstance(data, list) else [data]
    values = [int(v[:-1]) if isinstance(v, str) and v.endswith("n") else v for v in data]
    shape = tuple(desc["shape"]) or (1,)
    return (
        np.asarray(values, np.float64 if dtype.kind == "f" else np.int64)
        .astype(dtype)
        .reshape(shape)
    )


def _dml_type(x: np.ndarray) -> str:
    return x.dtype.name.upper()


def _arguments(op: dict) -> dict:
    merged = {}
    for arg in op["arguments"]:
        merged.update(arg)
    merged.update(merged.pop("options", None) or {})
    return merged


def _slice(x: np.ndarray, args: dict, rank0: bool) -> np.ndarray:
    starts = list(args["starts"]) or [0]
    sizes = list(args["sizes"]) or [1]
    strides = list(args.get("strides") or [1] * len(sizes))
    out = [1 + (s - 1) // k for s, k in zip(sizes, strides)]
    desc = dml.Slice1OperatorDesc(
        T(_dml_type(x), x.shape), T(_dml_type(x), out), starts, sizes, strides
    )
    return np.asarray(dml.compile_operator(desc)(x))


def _identity(x: np.ndarray, sizes: list[int], strides: list[int] | None) -> np.ndarray:
    """ELEMENT_WISE_IDENTITY reading x's packed buffer through (sizes, strides)."""
    t = _dml_type(x)
    sizes = sizes or [1]
    desc = dml.ElementWiseIdentityOperatorDesc(T(t, sizes, strides), T(t, sizes))
    op = dml.compile_operator(desc)
    (out,) = op.run_buffers([x.ravel()], [np.zeros(math.prod(sizes), x.dtype)])
    return np.asarray(out).reshape(sizes)


def _transpose(x: np.ndarray, args: dict, rank0: bool) -> np.ndarray:
    rank = 0 if rank0 else x.ndim
    perm = list(args.get("permutation") or range(rank - 1, -1, -1))
    if not perm:
        return _identity(x, [1], None)
    packed = packed_strides(x.shape)
    return _identity(x, [x.shape[p] for p in perm], [packed[p] for p in perm])


def _expand(x: np.ndarray, args: dict, rank0: bool) -> np.ndarray:
    shape = list(args["newShape"])
    in_shape = [] if rank0 else list(x.shape)
    packed = packed_strides(in_shape) if in_shape else ()
    lead = len(shape) - len(in_shape)
    strides = []
    for j, n in enumerate(shape):
        i = j - lead
        strides.append(0 if i < 0 or in_shape[i] == 1 else packed[i])
    return _identity(x, shape, strides)


def _reshape(x: np.ndarray, args: dict, rank0: bool) -> np.ndarray:
    return _identity(x, list(args["newShape"]), None)


RUN = {"slice": _slice, "transpose": _transpose, "expand": _expand, "reshape": _reshape}


def ulp_distance(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|difference of bit patterns| in the output type (WPT's ULP), 0 for equal values."""
    if got.dtype.kind != "f":
        return np.abs(got.astype(object) - want.astype(object)).astype(np.float64)
    bits = np.dtype(f"int{got.dtype.itemsize * 8}")

    def ordered(a):
        # Bit patterns made monotonic in the value (negative floats count down from -0).
        i = a.view(bits).astype(np.int64)
        return np.where(i < 0, np.iinfo(bits).min - i, i)

    return np.abs(ordered(got) - ordered(want)).astype(np.float64)


@pytest.mark.parametrize("operation, case", CASES, ids=[f"{op}: {c['name']}" for op, c in CASES])
def test_wpt_case(operation, case):
    graph = case["graph"]
    (op,) = graph["operators"]
    assert op["name"] == operation
    args = _arguments(op)
    (entry,) = graph["inputs"].values()
    x = _array(entry)
    rank0 = entry["descriptor"]["shape"] == []
    (want_entry,) = graph["expectedOutputs"].values()
    want = _array(want_entry)
    got = RUN[operation](x, args, rank0)
    assert got.dtype == want.dtype
    assert got.size == want.size
    got = got.reshape(want.shape)
    distance = ulp_distance(got, want)
    assert distance.max(initial=0) <= FILES[operation], (got, want)


def test_every_file_is_mapped():
    counts = {name: sum(1 for op, _ in CASES if op == name) for name in FILES}
    assert counts == {"slice": 19, "transpose": 18, "expand": 44, "reshape": 66}
