"""Whole networks as DML graphs (examples/networks.py): ResNet and the GPT stack.

Small networks with the full architectures' block structure are run and compared with
references written directly in jax (``lax.conv_general_dilated`` in NHWC, jnp einsums), which
share nothing with dml_jax's lowerings; the full-size builders are checked structurally (node
counts, parameter counts, shapes traced without running). The sharded runs live in the 8-device
worker (tests/_sharding_worker.py, ``network/...`` cases). With PyTorch importable, the
benchmark's PyTorch networks are checked against the DML graphs too.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections import Counter
from pathlib import Path

import jax
import numpy as np
import pytest

import dml_jax as dml
from dml_jax.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


nets = _load("networks", ROOT / "examples" / "networks.py")
SMALL_RESNET, SMALL_GPT = nets.SMALL_RESNET, nets.SMALL_GPT
RESNET_BATCH, GPT_BATCH = 2, 2


def relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got.reshape(want.shape) - want)) / np.max(np.abs(want)))


def run(net: nets.Network, x) -> np.ndarray:
    return np.asarray(net.compile()(*net.arguments(x=x)), np.float32)


def attention_nodes(net: nets.Network) -> list:
    return [n for n in net.graph.nodes if n.operator_type == "DML_OPERATOR_MULTIHEAD_ATTENTION"]


@pytest.fixture(scope="module")
def resnet():
    net = nets.resnet50(RESNET_BATCH, "FLOAT32", **SMALL_RESNET)
    x = net.example_data()["x"]
    want = np.asarray(nets.resnet_reference(net.parameters, x, SMALL_RESNET["layers"]))
    return net, x, want


@pytest.fixture(scope="module")
def gpt():
    net = nets.gpt_stack(GPT_BATCH, dtype="FLOAT32", **SMALL_GPT)
    x = net.example_data()["x"]
    heads, layers = SMALL_GPT["heads"], SMALL_GPT["layers"]
    want = np.asarray(nets.gpt_reference(net.parameters, x, GPT_BATCH, heads, layers))
    return net, x, want


# ------------------------------------------------------------------------------ ResNet


def test_resnet_reference_is_not_trivial(resnet):
    # Logits that vary over classes and images, and change with the weights: a broken
    # graph cannot match them by accident.
    _, x, want = resnet
    assert want.shape == (RESNET_BATCH, SMALL_RESNET["classes"])
    assert np.std(want) > 0.1 and relative_error(want[0], want[1]) > 0.1
    other = nets.resnet_parameters(SMALL_RESNET["width"], SMALL_RESNET["layers"], 10, seed=1)
    assert relative_error(nets.resnet_reference(other, x, SMALL_RESNET["layers"]), want) > 0.1


@pytest.mark.parametrize("batch_norm", ["fold", "operator"])
def test_resnet_float32_matches_reference(resnet, batch_norm):
    net, x, want = resnet
    if batch_norm != "fold":
        net = nets.resnet50(RESNET_BATCH, "FLOAT32", batch_norm=batch_norm, **SMALL_RESNET)
    assert relative_error(run(net, x), want) < 1e-4


def test_resnet_float16_follows_float32_reference(resnet):
    _, x, want = resnet
    net = nets.resnet50(RESNET_BATCH, "FLOAT16", **SMALL_RESNET)
    assert net.weights["conv1.weight"].dtype == np.float16
    got = run(net, x.astype(np.float16))
    assert np.isfinite(got).all()
    assert relative_error(got, want) < 5e-3


def test_resnet50_full_size_structure():
    net = nets.resnet50(1)
    counts = Counter(node.operator_type for node in net.graph.nodes)
    assert counts == {
        "DML_OPERATOR_CONVOLUTION": 54,  # 49 in the blocks, 4 projections, the stem, the fc
        "DML_OPERATOR_ELEMENT_WISE_ADD1": 16,
        "DML_OPERATOR_MAX_POOLING": 1,
        "DML_OPERATOR_AVERAGE_POOLING": 1,
    }
    relu = [n for n in net.graph.nodes if getattr(n, "fused_activation", None) is not None]
    assert len(relu) == 1 + 2 * 16 + 16  # stem, two per block, every residual add
    # torchvision's resnet50 has 25,557,032 parameters (the statistics are buffers).
    learned = sum(v.size for k, v in net.parameters.items() if "running" not in k)
    assert learned == 25_557_032
    # Folded: each normalization's scale went into its convolution's filter, its shift became
    # the convolution's bias.
    channels = sum(v.size for k, v in net.parameters.items() if k.endswith("running_mean"))
    assert sum(v.size for v in net.weights.values()) == learned - channels
    pools = [n for n in net.graph.nodes if "POOLING" in n.operator_type]
    assert pools[0].output_tensor.sizes == (1, 64, 56, 56)
    assert pools[1].input_tensor.sizes == (1, 2048, 7, 7)
    dml.validate_graph(net.graph)
    shapes = [jax.ShapeDtypeStruct(t.sizes, t.dtype) for t in net.input_descs]
    out = jax.eval_shape(net.compile().fn, *shapes)
    assert out.shape == (1, 1000, 1, 1) and out.dtype == np.float32


def test_resnet50_batch_norm_operator_structure():
    net = nets.resnet50(2, "FLOAT16", batch_norm="operator")
    counts = Counter(node.operator_type for node in net.graph.nodes)
    assert counts["DML_OPERATOR_BATCH_NORMALIZATION"] == 53
    assert counts["DML_OPERATOR_CONVOLUTION"] == 54
    assert net.input_descs[0].sizes == (2, 3, 224, 224)
    dml.validate_graph(net.graph)


def test_resnet_builder_rejects_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 32"):
        nets.resnet50(1, image=100)
    with pytest.raises(ValueError, match="batch_norm"):
        nets.resnet50(1, batch_norm="drop")


# ------------------------------------------------------------------------------ GPT


def test_gpt_float32_matches_reference(gpt):
    net, x, want = gpt
    assert np.std(want) > 0.5
    assert relative_error(run(net, x), want) < 1e-4


def test_gpt_with_separate_qkv_projections_matches_reference(gpt):
    # Three GEMMs read by the attention as separate Q, K, V tensors: the same network.
    _, x, want = gpt
    net = nets.gpt_stack(GPT_BATCH, dtype="FLOAT32", fused_qkv=False, **SMALL_GPT)
    nodes = attention_nodes(net)
    assert nodes and all(n.query_tensor is not None for n in nodes)
    assert (
        sum(isinstance(n, dml.GemmOperatorDesc) for n in net.graph.nodes) == 6 * SMALL_GPT["layers"]
    )
    assert relative_error(run(net, x), want) < 1e-4


def test_gpt_float16_follows_float32_reference(gpt):
    _, x, want = gpt
    net = nets.gpt_stack(GPT_BATCH, dtype="FLOAT16", **SMALL_GPT)
    got = run(net, x.astype(np.float16))
    assert np.isfinite(got).all()
    assert relative_error(got, want) < 1e-2


def test_gpt_half_precision_flag_computes_as_the_float16_jax_reference(gpt):
    """``Network.compile(allow_half_precision=True)`` carries DirectML's flag to every node: on
    the lax lowering the float16 GPT then rounds its attention logits and probabilities to
    float16 as the plain-jnp float16 reference does, where the exact lowering keeps them in
    float32 (the networks suite's "dml lax half precision" row)."""
    import jax.numpy as jnp

    _, x, want = gpt
    net = nets.gpt_stack(GPT_BATCH, dtype="FLOAT16", **SMALL_GPT)
    x16 = x.astype(np.float16)
    args = net.arguments(x=x16)
    exact = np.asarray(net.compile(fast_paths=False)(*args), np.float32)
    flagged = net.compile(fast_paths=False, allow_half_precision=True)
    assert flagged is not net.compile(fast_paths=False)
    half = np.asarray(flagged(*args), np.float32)
    heads, layers = SMALL_GPT["heads"], SMALL_GPT["layers"]
    ref16 = np.asarray(
        nets.gpt_reference(net.parameters, x16, GPT_BATCH, heads, layers, jnp.float16), np.float32
    )
    assert not np.array_equal(half, exact)  # the flag changed the rounding
    assert relative_error(half, ref16) < 5e-3
    assert relative_error(half, want) < 1e-2


def test_gpt_attention_is_causal_and_per_sequence(gpt):
    # Changing the last token of the first sequence changes that token's output only (not by
    # a constant: layer norm would remove it).
    net, x, _ = gpt
    seq = SMALL_GPT["seq"]
    before = run(net, x)
    changed = x.copy()
    changed[seq - 1] += np.random.default_rng(5).standard_normal(x.shape[1], np.float32)
    after = run(net, changed)
    np.testing.assert_allclose(after[: seq - 1], before[: seq - 1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(after[seq:], before[seq:], rtol=1e-6, atol=1e-6)
    assert np.max(np.abs(after[seq - 1] - before[seq - 1])) > 1e-2


def test_gpt_mask_as_a_graph_input_gives_the_same_outputs(gpt):
    # The causal mask as an INT32 graph input (read through an IDENTITY) instead of a constant
    # data node: the same values, and the mask is then among the weights.
    net, x, want = gpt
    other = nets.gpt_stack(GPT_BATCH, dtype="FLOAT32", mask_input=True, **SMALL_GPT)
    assert not other.graph.constant_nodes and "causal_mask" in other.weights
    got = run(other, x)
    assert relative_error(got, want) < 1e-5
    np.testing.assert_array_equal(got, run(net, x))


def test_gpt_mask_input_fixed_by_constant_inputs_is_known_as_causal(gpt, monkeypatch):
    """The causal mask as a graph input (through an IDENTITY), its value given to
    ``compile_graph(constant_inputs=...)``: MULTIHEAD_ATTENTION's lax lowering knows it while
    tracing and computes the causal tiles (here 4 blocks of 2 of the 8 tokens); without it the
    mask is known only at run time. The outputs are the reference's either way."""
    from dml_jax.ops import attention as A

    monkeypatch.setattr(A, "CAUSAL_MIN_ROWS", 2)
    seen = []
    blocks = A.causal_blocks
    monkeypatch.setattr(A, "causal_blocks", lambda d, g: seen.append(blocks(d, g)) or seen[-1])
    _, x, want = gpt
    other = nets.gpt_stack(GPT_BATCH, dtype="FLOAT32", mask_input=True, **SMALL_GPT)
    index = other.input_names.index("causal_mask")
    args = other.arguments(x=x)
    for fixed, expected in (({index: other.weights["causal_mask"]}, 4), (None, None)):
        seen.clear()
        g = dml.compile_graph(other.graph, reinterpret_edges=other.reinterpret_edges,
                              fast_paths=False, constant_inputs=fixed)  # fmt: skip
        got = np.asarray(g(*args), np.float32)
        assert set(seen) == {expected}
        assert relative_error(got, want) < 1e-4


@pytest.mark.parametrize(
    "fixed, message",
    [
        ([1, 2], "expected a mapping"),
        ({99: np.zeros(1)}, "99 is not a graph input index"),
        ({"causal_mask": np.zeros(1)}, "'causal_mask' is not a graph input index"),
        ({"index": np.zeros(3, np.int32)}, "3 elements where Inputs"),
    ],
)
def test_constant_inputs_are_checked(fixed, message):
    other = nets.gpt_stack(GPT_BATCH, dtype="FLOAT32", mask_input=True, **SMALL_GPT)
    if isinstance(fixed, dict) and "index" in fixed:
        fixed = {other.input_names.index("causal_mask"): fixed["index"]}
    with pytest.raises(dml.ValidationError, match=message):
        dml.compile_graph(other.graph, reinterpret_edges=other.reinterpret_edges,
                          constant_inputs=fixed)  # fmt: skip


def test_gpt_full_size_structure():
    net = nets.gpt_stack(1, 1024, 1024, 16, 12, "FLOAT32")  # FLOAT16: the small tests
    counts = Counter(node.operator_type for node in net.graph.nodes)
    assert counts == {
        "DML_OPERATOR_MEAN_VARIANCE_NORMALIZATION1": 25,
        "DML_OPERATOR_GEMM": 12 * 4,  # QKV, out, two MLP
        "DML_OPERATOR_MULTIHEAD_ATTENTION": 12,
        "DML_OPERATOR_ACTIVATION_GELU": 12,
        "DML_OPERATOR_ELEMENT_WISE_ADD": 24,
        "DML_OPERATOR_ELEMENT_WISE_IDENTITY": 12 * 4,  # 4 biases per layer
        "CONSTANT": 1,  # the causal mask, a ConstantDataNode
    }
    (mask,) = (net.graph.nodes[n] for n in net.graph.constant_nodes)
    assert mask.data == np.tril(np.ones((1024, 1024), np.int32)).tobytes()
    attention = attention_nodes(net)
    assert attention[0].stacked_query_key_value_tensor.sizes == (1, 1024, 16, 3, 64)
    assert attention[0].mask_tensor.sizes == (1, 16, 1024, 1024)
    # 12 d^2 + 13 d per layer (4 attention and 2 MLP projections, biases, 2 norms) + 2 d.
    d = 1024
    assert sum(v.size for v in net.parameters.values()) == 12 * (12 * d * d + 13 * d) + 2 * d
    # The graph's weights are the parameters (Q, K and V fused); the mask is a constant.
    assert sum(v.size for v in net.weights.values()) == 12 * (12 * d * d + 13 * d) + 2 * d
    assert set(net.shard_dims) <= set(net.weights)
    dml.validate_graph(net.graph, reinterpret_edges=True)
    shapes = [jax.ShapeDtypeStruct(t.sizes, t.dtype) for t in net.input_descs]
    out = jax.eval_shape(net.compile().fn, *shapes)
    assert out.shape == (1024, 1024) and out.dtype == np.float32


def test_gpt_fused_qkv_rows_are_per_head_q_k_v(gpt):
    # Row (h, t, j) of the fused projection is row h * Dh + j of PyTorch's q, k or v (t = 0, 1,
    # 2); its bias likewise. Written out index by index, independently of the reshapes.
    net, _, _ = gpt
    heads, d = SMALL_GPT["heads"], SMALL_GPT["d_model"]
    head = d // heads
    weight, bias = nets.stacked_qkv(net.parameters, "blocks.1", heads)
    assert weight.shape == (3 * d, d) and bias.shape == (3 * d,)
    for h in range(heads):
        for t, name in enumerate("qkv"):
            for j in range(head):
                row = (h * 3 + t) * head + j
                want = net.parameters[f"blocks.1.attn.{name}.weight"][h * head + j]
                np.testing.assert_array_equal(weight[row], want)
                assert bias[row] == net.parameters[f"blocks.1.attn.{name}.bias"][h * head + j]
    np.testing.assert_array_equal(net.weights["blocks.1.attn.qkv.weight"], weight)
    np.testing.assert_array_equal(net.weights["blocks.1.attn.qkv.bias"], bias.reshape(1, -1))


@pytest.mark.parametrize(
    "config", [dict(SMALL_GPT, batch=GPT_BATCH), {"batch": 8, "seq": 1024, "layers": 1}]
)
def test_float16_gpt_attention_takes_the_cudnn_path(config):
    # The benchmark's float16 GPT must exercise cuDNN's fused attention: every attention node is
    # a description the CUDA fast path accepts (``applies`` adds only the compilation on a GPU).
    # The second configuration is the benchmark's (d 1024, 16 heads of 64), one layer of it.
    from dml_jax.kernels import attention

    for fused in (True, False):
        nodes = attention_nodes(nets.gpt_stack(dtype="FLOAT16", fused_qkv=fused, **config))
        assert len(nodes) == config["layers"]
        assert all(attention.expressible(n) for n in nodes)
    # ... and the FLOAT32 network's are not (cuDNN computes float16 and bfloat16 only).
    nodes = attention_nodes(nets.gpt_stack(dtype="FLOAT32", **config))
    assert nodes and not any(attention.expressible(n) for n in nodes)


def test_gpt_needs_reinterpreted_edges(gpt):
    net, _, _ = gpt
    with pytest.raises(dml.ValidationError, match="an intermediate edge needs one data type"):
        dml.compile_graph(net.graph)


# ------------------------------------------------------------------------------ JSON


@pytest.mark.parametrize("which", ["resnet", "gpt"])
def test_graph_to_json_round_trips(which, resnet, gpt):
    net = (resnet if which == "resnet" else gpt)[0]
    text = json.dumps(dml.graph_to_json(net.graph))
    assert dml.graph_from_json(json.loads(text)) == net.graph


def test_exported_resnet_runs_through_dml_jax_run(tmp_path, monkeypatch, capsys, resnet):
    net, x, want = resnet
    path = nets.export_dxdispatch(net, tmp_path, {"x": x})
    model = json.loads(path.read_text())
    assert dml.graph_from_json(model["dispatchables"]["resnet50"]) == net.graph
    monkeypatch.chdir(tmp_path)
    code = cli_main(["run", "model.json"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Dispatch 'resnet50'" in out and "Resource 'output': " in out
    got = np.load(tmp_path / "output.npy")
    assert got.shape == (RESNET_BATCH, SMALL_RESNET["classes"], 1, 1)
    assert relative_error(got, want) < 1e-4


def test_export_refuses_a_graph_with_reinterpreted_edges(tmp_path, gpt):
    with pytest.raises(ValueError, match="no DxDispatch form"):
        nets.export_dxdispatch(gpt[0], tmp_path)


# ------------------------------------------------------------------------------ benchmark
# (the networks suite's quick run is tests/test_bench.py's)


def test_torch_networks_match_the_graphs(resnet, gpt):
    torch = pytest.importorskip("torch")
    from dml_jax.bench.suites import networks as bench

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    net, x, want = resnet
    c = net.config
    model = bench._load(torch, bench.torch_resnet(torch, c["width"], c["layers"], c["classes"]),
                        net.parameters)  # fmt: skip
    with torch.inference_mode():
        plain = model(torch.from_numpy(x)).numpy()
        folded = bench.fold_batch_norm(torch, model)(torch.from_numpy(x)).numpy()
    assert relative_error(plain, want) < 1e-4
    assert relative_error(folded, want) < 1e-4
    net, x, want = gpt
    c = net.config
    model = bench._load(torch, bench.torch_gpt(torch, c["d_model"], c["heads"], c["layers"],
                                               c["ffn"]), net.parameters)  # fmt: skip
    with torch.inference_mode():
        got = model(torch.from_numpy(x).reshape(c["batch"], c["seq"], -1)).numpy()
    assert relative_error(got, want) < 1e-4


@pytest.mark.skipif(
    len([d for d in jax.devices() if d.platform == "gpu"]) < 2, reason="needs 2 GPUs"
)
def test_float16_gpt_tensor_parallel_on_two_gpus_matches_one():
    # On GPUs the attention nodes take cuDNN's fused attention: with the heads split over two
    # devices, its partitioning must keep the shared causal mask whole.
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    net = nets.gpt_stack(2, dtype="FLOAT16", seq=128, d_model=256, heads=4, layers=2)
    x = net.example_data()["x"]
    want = run(net, x)
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices("gpu")[:2])
    ins = nets.shardings(net, mesh, None, "x")
    g = net.compile(in_shardings=ins, out_shardings=NamedSharding(mesh, P()))
    got = np.asarray(g(*[jax.device_put(a, s) for a, s in zip(net.arguments(x=x), ins)]))
    assert relative_error(got.astype(np.float32), want) < 2e-2
