"""Fast paths in programs split over devices (issue 65, item 1): a Pallas kernel is a call
XLA's SPMD partitioner cannot split, so in a sharded program it would run whole on every
device after an all-gather of its inputs. Traced for CUDA on simulated CPU devices
(tests/_sharded_kernels_worker.py), every case holds the kernel on one device (so the check
can fail) and none outside a per-shard region once sharded, with the sharded values equal to
the one-device ones: the REDUCE kernel gives way to lax, the normalization kernels of the ONNX
transformer run on each device's rows (``kernels/rows_shards.py``)."""

from __future__ import annotations

import _workers  # this folder's
import jax
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath

KERNEL = "pallas_call["


@pytest.fixture(scope="module")
def report() -> dict:
    return _workers.report("_sharded_kernels_worker.py")


# case -> per-shard regions of the sharded program: the REDUCE kernel has none (it gives way
# to lax); each of the transformer's normalization kernels sits in one
CASES = {
    "REDUCE LOG_SUM_EXP, rows sharded": "none",
    "graph CLIP -> REDUCE LOG_SUM_EXP, rows sharded": "none",
    "ONNX transformer on a 2 x 4 mesh": "each",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_kernel_call_in_a_sharded_program(report, case):
    got = report[case]
    assert "error" not in got, got
    assert got["one_device"] > 0  # the kernel applies to this program on one device
    assert got["sharded"] == 0
    assert got.get("context_mesh", 0) == 0  # traced under jax.set_mesh of 8 devices
    regions = got["sharded_regions"]
    assert regions == (0 if CASES[case] == "none" else got["one_device"]), got
    assert got["equal"]


# case -> the rows each device's kernel takes (64 rows over 8 devices, or all 64 where every
# device holds them whole)
ROWS = {
    "MVN (layer norm), rows sharded": [8, 512],
    "MVN (layer norm), rows whole on every device": [64, 512],
    "SOFTMAX over the minor axis, rows sharded": [8, 512],
}


@pytest.mark.parametrize("case", sorted(ROWS))
def test_row_kernels_run_on_each_devices_rows(report, case):
    """The normalization and softmax kernels (interpret mode) inside per-shard regions, run on
    the CPU: their values are the lax lowering's, and a kernel call saw each device's rows."""
    got = report[case]
    assert got["outside"] == 0 and got["regions"] == 1
    assert got["max_abs_diff"] < 1e-5, got
    assert ROWS[case] in got["calls"], got["calls"]


def test_softmax_over_another_axis_gives_way_to_lax(report):
    """Over the major axis the kernel has no per-shard form: no region, no kernel outside one,
    the lax lowering's values."""
    got = report["SOFTMAX over the major axis, columns sharded"]
    assert got["outside"] == 0 and got["regions"] == 0
    assert got["max_abs_diff"] < 1e-5, got


def test_sharded_transformer_with_kernels_per_shard_communicates_the_minimum(report):
    """The 2 x 4 (data, model) transformer traced for CUDA, its normalization and softmax
    kernels in per-shard regions, compiled (kernels interpreted): Megatron's two all-reduces a
    layer for its two layers, nothing else (a region that gathered its rows would add an
    all-gather)."""
    assert report["ONNX transformer on a 2 x 4 mesh"]["collectives"] == {"all-reduce": 4}


def test_worker_reports_no_error(report):
    assert not [k for k, v in report.items() if "error" in v], report


def _lse():
    x = dml.TensorDesc("FLOAT16", (1024, 1024))
    return dml.ReduceOperatorDesc("LOG_SUM_EXP", x, x.like(sizes=(1024, 1)), [1])


def test_sharded_context_steps_kernels_aside(monkeypatch):
    """On one device: ``fastpath.sharded()`` gives the lax lowering where the fast path is a
    kernel; the same trace without it holds the kernel; the values agree."""
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    op = dml.compile_operator(_lse(), fast_paths=True)
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float16)
    # (a function of its own for each trace: jax caches a trace without the context in its key)
    with fastpath.target_platform("cuda"):
        plain = str(jax.make_jaxpr(lambda v: op.fn(v))(x))
        with fastpath.sharded():
            aside = str(jax.make_jaxpr(lambda v: op.fn(v))(x))
    assert KERNEL in plain and KERNEL not in aside
    with fastpath.sharded():
        got = np.asarray(jax.jit(lambda v: op.fn(v))(x), np.float32)
    want = np.log(np.exp(x.astype(np.float64)).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(got, want, rtol=2e-3)


def test_opaque_finds_kernels_at_any_depth(monkeypatch):
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    op = dml.compile_operator(_lse(), fast_paths=True)
    x = np.zeros((1024, 1024), np.float16)
    with fastpath.target_platform("cuda"):
        assert fastpath.opaque(jax.jit(lambda v: op.fn(v)), x)  # inside a nested jit
        assert not fastpath.opaque(lambda v: (v * 2,), x)


@pytest.mark.parametrize(
    "shape, axes, lead",
    [
        ((8, 512, 1024), (2,), (8, 512)),  # a layer norm over the features
        ((2, 64, 7, 7), (2, 3), (2, 64)),  # an instance norm over H and W
        ((2, 64, 7, 7), (1, 2, 3), (2,)),  # a norm over C, H and W
        ((4, 1, 256), (2,), (4, 1)),  # a size-1 dimension before the normalized one
        ((4, 256, 1), (1,), (4,)),  # ... and after it
        ((4, 256, 8), (1,), None),  # the normalized axis not the trailing one
    ],
)
def test_rows_keep_their_leading_dimensions(shape, axes, lead):
    from dml_jax.kernels import rows_shards

    assert rows_shards.leading(shape, axes) == lead
