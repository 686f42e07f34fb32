"""The GEMM kernel on each device's shards (issue 65, items 1 and 2: fast paths that shard):
``kernels/gemm_shards.py`` around the kernel, traced for CUDA on 2 and 2 x 2 meshes of
simulated CPU devices with a stand-in for the Mosaic kernel (tests/_gemm_shards_worker.py).
Each split computes the product's values, communicates what Megatron's split needs and no
more, runs the kernel on the shards' shapes where K is whole, and leaves no kernel call outside
a per-shard region."""

from __future__ import annotations

import _workers  # this folder's
import pytest

# float16 products of 512 and 2,048 terms, rounded as the lax lowering rounds them
TOLERANCE = 2e-3


@pytest.fixture(scope="module")
def report() -> dict:
    return _workers.report("_gemm_shards_worker.py")


# case -> (collectives of the compiled program, shapes the kernel runs on inside it: A, B)
CASES = {
    # B split on N: each device's kernel on its columns, nothing communicated
    "GEMM column-parallel": ({}, [[256, 512], [512, 512]]),
    # A and B split on K: partial products summed by one all-reduce, C after it (no kernel)
    "GEMM row-parallel": ({"all-reduce": 1}, None),
    # ... the sums wanted split by rows (sequence parallelism): one reduce-scatter instead
    "GEMM row-parallel, rows of the sums split": ({"reduce-scatter": 1}, None),
    # A split on M: each device's kernel on its rows
    "GEMM data-parallel": ({}, [[128, 512], [1024, 512]]),
    # M and N on one axis: the smaller operand gathered, A's rows here, B's columns kept
    "GEMM rows and columns on one axis": ({"all-gather": 1}, [[256, 512], [512, 512]]),
    # ... and B here (2,048 rows by 256 columns), A's rows kept; the bias row, which XLA's
    # propagation had split by B's columns, is gathered with it (512 bytes)
    "GEMM rows and columns on one axis, B smaller": ({"all-gather": 2}, [[1024, 512], [256, 512]]),
    # the first product's kernel (GELU fused) on its columns, one all-reduce for the block
    "MLP block, Megatron's split": ({"all-reduce": 1}, [[256, 512], [1024, 512]]),
    # a 2 x 2 (data, model) mesh: A's rows over "data", B's columns over "model"
    "GEMM on data x model, column-parallel": ({}, [[256, 512], [512, 512]]),
    # ... K over "model": one all-reduce within each "model" group
    "GEMM on data x model, row-parallel": ({"all-reduce": 1}, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_split_product(report, case):
    got = report[case]
    assert "error" not in got, got
    collectives, shards = CASES[case]
    assert got["relative_error"] < TOLERANCE, got
    assert got["collectives"] == collectives
    assert got["outside"] == 0  # no kernel call the partitioner would run whole
    if shards is None:
        # row-parallel: the kernel's epilogue cannot precede the sum, so no shard runs it (the
        # calls recorded are the traces of the unsplit function, of B's whole {1024, 512})
        assert all(c[1] == [1024, 512] for c in got["calls"]), got["calls"]
    else:
        assert shards in got["calls"], got["calls"]


def test_shards_narrower_than_the_kernels_tiles_take_lax(report):
    """Columns split into shards of 128 (the kernel takes multiples of 256): each device runs
    the two nodes' lax lowerings on its shards, with nothing communicated."""
    got = report["GEMM column-parallel, shards narrower than the kernel's tiles"]
    assert got["relative_error"] < TOLERANCE and got["collectives"] == {}
    assert got["outside"] == 0
    assert [[256, 512], [128, 512]] not in got["calls"], got["calls"]


def test_per_shard_off_gives_way_to_lax(report):
    """``fastpath.PER_SHARD = False``: no kernel call at any shard's shape, none outside."""
    got = report["GEMM column-parallel, PER_SHARD off"]
    assert got["relative_error"] < TOLERANCE and got["collectives"] == {}
    assert got["outside"] == 0
    assert [[256, 512], [512, 512]] not in got["calls"], got["calls"]


def test_gpt_layer_runs_its_four_products_per_shard(report):
    """The QKV projection (heads written apart for the attention), the first MLP product with
    its GELU and the two row-parallel products with their residual adds each sit in a
    per-shard region (none outside one), and the compiled layer communicates Megatron's
    minimum."""
    got = report["GPT layer, tensor-parallel"]
    # Megatron's minimum: an all-reduce after the attention block and one after the MLP, each
    # of the layer's float16 activations (2 x 128 tokens of 512 features), and nothing else
    minimum = {"all-reduce": {"count": 2, "bytes": 2 * (2 * 128) * 512 * 2}}
    assert got == {"outside": 0, "regions": 4, "collectives": minimum}


def test_worker_reports_every_case(report):
    extra = [
        "GPT layer, tensor-parallel",
        "GEMM column-parallel, PER_SHARD off",
        "GEMM column-parallel, shards narrower than the kernel's tiles",
    ]
    assert sorted(report) == sorted([*CASES, *extra]), report


def _hopper_pair() -> bool:
    import jax

    from dml_jax.kernels import mosaic

    try:
        return mosaic.hopper() and len(jax.devices("cuda")) >= 2
    except RuntimeError:
        return False


@pytest.mark.skipif(not _hopper_pair(), reason="needs two Hopper GPUs")
def test_megatron_mlp_on_two_gpus_runs_the_kernel_per_shard():
    """The real kernel on each GPU's columns (the first product and its GELU), the second
    product's partial sums all-reduced: the values of the block on one GPU, whose program runs
    the kernel whole."""
    import _megatron_mlp  # this folder's
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import dml_jax as dml

    graph, values = _megatron_mlp.graph(), _megatron_mlp.inputs()
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices("cuda")[:2])
    specs = (P(), P("x"), P(None, "x"), P(None, "x"), P())
    ins = tuple(NamedSharding(mesh, s) for s in specs)
    split = dml.compile_graph(graph, in_shardings=ins, out_shardings=NamedSharding(mesh, P()),
                              reinterpret_edges=True)  # fmt: skip
    text = split._jitted.lower(*values).compile().as_text()
    assert "mosaic_gpu" in text  # the kernel, inside the split program
    assert text.count("all-reduce-start(") + text.count("all-reduce(") >= 1
    got = np.asarray(split(*values), np.float64)
    one = np.asarray(dml.compile_graph(graph, reinterpret_edges=True)(*values), np.float64)
    want = _megatron_mlp.reference(values)
    scale = np.abs(want).max()
    assert np.abs(got - want).max() / scale < TOLERANCE
    assert np.abs(got - one).max() / scale < TOLERANCE
