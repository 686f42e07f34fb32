"""Whole networks as DML graphs: ResNet-50 and a GPT-style transformer block stack.

Each builder returns a ``Network``: one ``GraphDesc`` written with DirectML operators, the values of
its constant inputs (seeded random weights), and the model's parameters under PyTorch's names (the
networks suite, ``dml_jax/bench/suites/networks.py``, loads them into the same networks written in
PyTorch). Weights are graph inputs, not constants baked into the graph, so they can be sharded like
any input.

**ResNet-50** (inference, NCHW, float32 or float16; torchvision's v1.5 layout, stride in the 3x3
convolution). Every convolution is one CONVOLUTION node with the batch normalization after it
folded into its filter and bias (``batch_norm="fold"``, what inference engines do) or followed by
a BATCH_NORMALIZATION node (``batch_norm="operator"``); the ReLU is the node's FusedActivation.
A bottleneck block ends in ELEMENT_WISE_ADD1 with a fused RELU; the stem has a 3x3 MAX_POOLING,
the head a global AVERAGE_POOLING and the classifier a 1x1 CONVOLUTION on the pooled {N, 2048,
1, 1} (a fully connected layer that keeps the NCHW layout), so every edge joins equal tensor
descs and the graph is valid without reinterpreted edges, as DxDispatch JSON graphs need.

**GPT stack** (pre-LN, causal): per layer MEAN_VARIANCE_NORMALIZATION1 over the features (layer
norm), one GEMM for the fused Q, K and V projection (weights in PyTorch's {out, in} layout with
TransB), MULTIHEAD_ATTENTION, the output projection, a residual ELEMENT_WISE_ADD, layer norm,
GEMM, ACTIVATION_GELU, GEMM and the second residual add; a final layer norm. Tokens are the rows
of {B * S, d} tensors. The QKV projection's output features are ordered (head, q/k/v, head size)
(``stacked_qkv`` builds its weight from PyTorch's separate q, k and v), so its {B * S, 3d}
output is MULTIHEAD_ATTENTION's packed {B, S, H, 3, Dh} StackedQueryKeyValueTensor, and the
attention's {B, S, d} output is the output projection's {B * S, d} input: both edges are
reshapes. The causal mask is a BOOLEAN MaskTensor (MaskFilterValue -inf) held by the graph: one
constant data node (DML_CONSTANT_DATA_GRAPH_NODE_DESC, ``dml.ConstantDataNode``) of S x S INT32
values, read by every layer as {B, H, S, S} through stride-0 batch and head dimensions; biases are
read through stride-0 broadcasts of graph inputs, so the graph compiles with
``reinterpret_edges=True`` (DirectML reinterprets an intermediate tensor's bytes the same way).
FLOAT16 attention nodes are descriptions cuDNN's fused attention computes
(``dml_jax/kernels/attention.py``): on CUDA the B * H * S * S scores stay on chip. DirectML's
attention has no causal flag; the fast path recognizes the constant mask as causal when the graph
is compiled and takes cuDNN's causal mode, which skips the blocks above the diagonal as
PyTorch's ``scaled_dot_product_attention(is_causal=True)`` does (a mask given as a graph input is
tested at run time instead, a conditional whose predicate the host reads each call).

Scaling out needs no new descriptors: ``shardings(net, mesh, data_axis, model_axis)`` gives one
``NamedSharding`` per graph input (the batch split over ``data_axis``; with ``model_axis`` the
fused QKV and first MLP weights split by output rows, so each device holds whole heads, and the
output projection and second MLP weight by input columns, Megatron's tensor parallelism) and
``Network.compile`` passes them to ``compile_graph``; GSPMD inserts the communication.

Run ``python examples/networks.py`` to build both networks at small sizes, run them and compare
them with references written directly in jax (``resnet_reference``, ``gpt_reference``), and
``python examples/networks.py export DIR`` to write a small ResNet as a DxDispatch model (JSON,
weights in .npy) that ``dml-jax run`` runs.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

try:
    import dml_jax as dml
except ImportError:  # running from a source checkout without installing the package
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import dml_jax as dml

import jax
import jax.numpy as jnp
from jax import lax

# The graph builder of the training example (examples/ is a folder of scripts, not a package).
sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_cnn import GraphBuilder

T = dml.TensorDesc
EPSILON = 1e-5  # batch and layer normalization, as PyTorch's default
RESNET50_LAYERS = (3, 4, 6, 3)


@dataclass(frozen=True, eq=False)
class Network:
    """A network as one DML graph, with the values of its constant inputs.

    Attributes:
        name: ``"resnet50"`` or ``"gpt"``.
        graph: the ``GraphDesc``.
        input_names: every graph input, in order.
        input_descs: their tensor descs.
        data_names: the inputs a caller supplies (``"x"``); every other input is in ``weights``.
        batch_dims: per data input, the dimension that holds the batch.
        weights: graph input values by name, in the network's data type.
        parameters: the model's parameters, float32, under PyTorch's names (batch normalization
            unfolded); ``weights`` are derived from them.
        shard_dims: per weight, the dimension tensor parallelism splits (empty for ResNet).
        reinterpret_edges: what ``compile_graph`` needs for this graph.
        config: the builder's arguments.
    """

    name: str
    graph: dml.GraphDesc
    input_names: tuple[str, ...]
    input_descs: tuple[dml.TensorDesc, ...]
    data_names: tuple[str, ...]
    batch_dims: dict[str, int]
    weights: dict[str, np.ndarray]
    parameters: dict[str, np.ndarray]
    shard_dims: dict[str, int]
    reinterpret_edges: bool
    config: dict

    def compile(
        self,
        in_shardings=None,
        out_shardings=None,
        *,
        fast_paths: bool = True,
        allow_half_precision: bool = False,
    ):
        """``compile_graph`` of the network (``fast_paths=False``: every node's lax lowering;
        ``allow_half_precision``: DirectML's ALLOW_HALF_PRECISION_COMPUTATION execution flag).

        Inside a graph the element-wise kernels stand aside (``fastpath.FastPath.standalone``),
        so residual adds and bias broadcasts fuse into the convolutions and products around
        them, while the fast paths that change the algorithm (cuDNN attention) stay.
        """
        return dml.compile_graph(
            self.graph,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
            reinterpret_edges=self.reinterpret_edges,
            fast_paths=fast_paths,
            allow_half_precision=allow_half_precision,
        )

    def arguments(self, **data) -> list:
        """The graph's inputs in order: ``data`` by name, then the weights."""
        missing = set(self.data_names) - set(data)
        if missing:
            raise ValueError(f"{self.name}: missing data inputs {sorted(missing)}")
        return [data[n] if n in self.data_names else self.weights[n] for n in self.input_names]

    def example_data(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Standard normal values for every data input, in the network's data type."""
        rng = np.random.default_rng(seed)
        out = {}
        for name, desc in zip(self.input_names, self.input_descs):
            if name in self.data_names:
                out[name] = rng.standard_normal(desc.sizes, np.float32).astype(desc.dtype)
        return out


class _Builder(GraphBuilder):
    """GraphBuilder with named inputs that carry their descs and values."""

    def __init__(self, dtype: str):
        super().__init__([])
        self.dtype = dtype
        self.descs: dict[str, dml.TensorDesc] = {}
        self.values: dict[str, np.ndarray] = {}

    def data(self, name: str, sizes) -> tuple:
        self.descs[name] = T(self.dtype, sizes)
        return self.input(name)

    def constant(self, name: str, value: np.ndarray, data_type: str | None = None) -> tuple:
        desc = T(data_type or self.dtype, value.shape)
        self.descs[name] = desc
        self.values[name] = np.ascontiguousarray(value, desc.dtype)
        return self.input(name)

    def network(self, name, outputs, data_batch_dims, parameters, shard_dims, reinterpret, config):
        names = tuple(self.inputs)
        return Network(
            name=name,
            graph=self.graph(outputs),
            input_names=names,
            input_descs=tuple(self.descs[n] for n in names),
            data_names=tuple(data_batch_dims),
            batch_dims=dict(data_batch_dims),
            weights=self.values,
            parameters=parameters,
            shard_dims=shard_dims,
            reinterpret_edges=reinterpret,
            config=config,
        )


# ---------------------------------------------------------------------------------------------
# ResNet-50


def uniform(rng, shape, std: float) -> np.ndarray:
    """float32 values uniform in [-b, b) with standard deviation ``std`` (b = sqrt(3) std):
    PyTorch's default initialization is uniform too, and it draws several times faster than
    normal values (the GPT stack has 151 million)."""
    w = rng.random(shape, np.float32)
    w *= np.float32(2 * math.sqrt(3.0) * std)
    w -= np.float32(math.sqrt(3.0) * std)
    return w


def resnet_blocks(width: int, layers) -> list[tuple[str, int, int, int]]:
    """(name, input channels, bottleneck channels, stride) of every bottleneck block in order;
    the first block of each stage has a projection shortcut (``downsample``)."""
    blocks, channels = [], width
    for stage, count in enumerate(layers):
        mid = width * 2**stage
        for j in range(count):
            stride = 2 if stage > 0 and j == 0 else 1
            blocks.append((f"layer{stage + 1}.{j}", channels, mid, stride))
            channels = 4 * mid
    return blocks


def resnet_parameters(width: int, layers, classes: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random ResNet parameters under torchvision's names (float32).

    Filters have He initialization's variance; batch normalization statistics and affine terms are drawn near the
    identity, with the last normalization of each block scaled down (as zero-initialized
    residuals are in training) so that activations stay of order 1 through all the blocks, in
    float16 too.
    """
    rng = np.random.default_rng(seed)
    p: dict[str, np.ndarray] = {}

    def conv(name, k, c, size):
        p[f"{name}.weight"] = uniform(rng, (k, c, size, size), math.sqrt(2.0 / (c * size * size)))

    def bn(name, c, gamma=(0.8, 1.2)):
        p[f"{name}.weight"] = rng.uniform(*gamma, c).astype(np.float32)
        p[f"{name}.bias"] = rng.normal(0.0, 0.05, c).astype(np.float32)
        p[f"{name}.running_mean"] = rng.normal(0.0, 0.1, c).astype(np.float32)
        p[f"{name}.running_var"] = rng.uniform(0.8, 1.2, c).astype(np.float32)

    conv("conv1", width, 3, 7)
    bn("bn1", width)
    for name, c, mid, _ in resnet_blocks(width, layers):
        conv(f"{name}.conv1", mid, c, 1)
        bn(f"{name}.bn1", mid)
        conv(f"{name}.conv2", mid, mid, 3)
        bn(f"{name}.bn2", mid)
        conv(f"{name}.conv3", 4 * mid, mid, 1)
        bn(f"{name}.bn3", 4 * mid, gamma=(0.1, 0.3))
        if name.endswith(".0"):
            conv(f"{name}.downsample.0", 4 * mid, c, 1)
            bn(f"{name}.downsample.1", 4 * mid)
    features = 4 * width * 2 ** (len(layers) - 1)
    p["fc.weight"] = uniform(rng, (classes, features), 1.0 / math.sqrt(features))
    p["fc.bias"] = rng.normal(0.0, 0.01, classes).astype(np.float32)
    return p


def _conv_bn(b: _Builder, x, x_desc, p, conv, bn, stride, pad, relu, batch_norm):
    """CONVOLUTION ``conv`` of ``x`` then batch normalization ``bn`` (folded or a node), with a
    fused ReLU; returns (handle, output desc)."""
    w = p[f"{conv}.weight"]
    k, _, size, _ = w.shape
    n, _, h, wd = x_desc.sizes
    out = T(
        b.dtype, (n, k, (h + 2 * pad - size) // stride + 1, (wd + 2 * pad - size) // stride + 1)
    )
    relu_desc = dml.ActivationReluOperatorDesc() if relu else None
    window = {
        "strides": (stride, stride),
        "dilations": (1, 1),
        "start_padding": (pad, pad),
        "end_padding": (pad, pad),
        "output_padding": (0, 0),
    }
    per_channel = T(b.dtype, (1, k, 1, 1))
    gamma, beta = p[f"{bn}.weight"], p[f"{bn}.bias"]
    mean, var = p[f"{bn}.running_mean"], p[f"{bn}.running_var"]
    if batch_norm == "fold":
        # y = gamma * (conv(x) - mean) / sqrt(var + eps) + beta: the filter scaled per output
        # channel, the rest a bias (in float64, rounded once to the network's type).
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + EPSILON)
        folded = w * scale[:, None, None, None]
        bias = (beta - mean * scale).reshape(per_channel.sizes)
        desc = dml.ConvolutionOperatorDesc(
            x_desc, T(b.dtype, w.shape), per_channel, out, **window, fused_activation=relu_desc
        )
        weight, bias = b.constant(f"{conv}.weight", folded), b.constant(f"{conv}.bias", bias)
        (y,) = b.add(desc, x, weight, bias)
        return y, out
    desc = dml.ConvolutionOperatorDesc(x_desc, T(b.dtype, w.shape), None, out, **window)
    (y,) = b.add(desc, x, b.constant(f"{conv}.weight", w))
    norm = dml.BatchNormalizationOperatorDesc(
        out, *(per_channel,) * 4, out, spatial=True, epsilon=EPSILON, fused_activation=relu_desc
    )
    stats = [
        b.constant(f"{bn}.{member}", p[f"{bn}.{member}"].reshape(per_channel.sizes))
        for member in ("running_mean", "running_var", "weight", "bias")
    ]
    (y,) = b.add(norm, y, *stats)
    return y, out


def resnet50(
    batch: int = 1,
    dtype: str = "FLOAT32",
    *,
    image: int = 224,
    width: int = 64,
    layers=RESNET50_LAYERS,
    classes: int = 1000,
    batch_norm: str = "fold",
    seed: int = 0,
) -> Network:
    """ResNet-50 inference on {batch, 3, image, image} images, logits {batch, classes, 1, 1}.

    ``width`` (the stem's channels, 64), ``layers`` (blocks per stage, (3, 4, 6, 3)) and
    ``classes`` shrink it for tests with the same block structure; ``image`` must be a
    multiple of 32. ``batch_norm`` is ``"fold"`` or ``"operator"`` (see the module docstring).
    """
    if batch_norm not in ("fold", "operator"):
        raise ValueError(f"batch_norm must be 'fold' or 'operator', got {batch_norm!r}")
    if image % 32:
        raise ValueError(f"image must be a multiple of 32, got {image}")
    p = resnet_parameters(width, layers, classes, seed)
    b = _Builder(dtype)
    x_desc = T(dtype, (batch, 3, image, image))
    x = b.data("x", x_desc.sizes)
    x, x_desc = _conv_bn(b, x, x_desc, p, "conv1", "bn1", 2, 3, True, batch_norm)
    n, c, h, w = x_desc.sizes
    pooled = T(dtype, (n, c, (h - 1) // 2 + 1, (w - 1) // 2 + 1))
    (x,) = b.add(
        dml.MaxPoolingOperatorDesc(
            x_desc, pooled, strides=(2, 2), window_size=(3, 3), start_padding=(1, 1),
            end_padding=(1, 1),
        ),
        x,
    )  # fmt: skip
    x_desc = pooled
    for name, _, _, stride in resnet_blocks(width, layers):
        y, y_desc = _conv_bn(
            b, x, x_desc, p, f"{name}.conv1", f"{name}.bn1", 1, 0, True, batch_norm
        )
        y, y_desc = _conv_bn(
            b, y, y_desc, p, f"{name}.conv2", f"{name}.bn2", stride, 1, True, batch_norm
        )
        y, y_desc = _conv_bn(
            b, y, y_desc, p, f"{name}.conv3", f"{name}.bn3", 1, 0, False, batch_norm
        )
        if name.endswith(".0"):
            x, _ = _conv_bn(
                b, x, x_desc, p, f"{name}.downsample.0", f"{name}.downsample.1", stride, 0, False,
                batch_norm,
            )  # fmt: skip
        add = dml.ElementWiseAdd1OperatorDesc(
            y_desc, y_desc, y_desc, fused_activation=dml.ActivationReluOperatorDesc()
        )
        (x,) = b.add(add, y, x)
        x_desc = y_desc
    n, c, h, w = x_desc.sizes
    features = T(dtype, (n, c, 1, 1))
    (x,) = b.add(
        dml.AveragePoolingOperatorDesc(
            x_desc, features, strides=(1, 1), window_size=(h, w), start_padding=(0, 0),
            end_padding=(0, 0), include_padding=False,
        ),
        x,
    )  # fmt: skip
    logits = T(dtype, (n, classes, 1, 1))
    fc = dml.ConvolutionOperatorDesc(
        features,
        T(dtype, (classes, c, 1, 1)),
        T(dtype, (1, classes, 1, 1)),
        logits,
        strides=(1, 1),
        dilations=(1, 1),
        start_padding=(0, 0),
        end_padding=(0, 0),
        output_padding=(0, 0),
    )
    weight = b.constant("fc.weight", p["fc.weight"].reshape(classes, c, 1, 1))
    (x,) = b.add(fc, x, weight, b.constant("fc.bias", p["fc.bias"].reshape(1, classes, 1, 1)))
    config = {
        "batch": batch, "dtype": dtype, "image": image, "width": width, "layers": tuple(layers),
        "classes": classes, "batch_norm": batch_norm, "seed": seed,
    }  # fmt: skip
    return b.network("resnet50", [x], {"x": 0}, p, {}, False, config)


def resnet_reference(parameters: dict, x, layers, dtype=jnp.float32):
    """ResNet inference written directly with ``lax.conv_general_dilated`` in NHWC (no dml_jax):
    {N, 3, H, W} images to {N, classes} logits. Batch normalization is applied from its
    statistics, as PyTorch's eval mode does. float32 runs at full precision."""
    precision = lax.Precision.HIGHEST if dtype == jnp.float32 else None
    p = {k: jnp.asarray(v, jnp.float32) for k, v in parameters.items()}
    h = jnp.transpose(jnp.asarray(x, dtype), (0, 2, 3, 1))

    def conv(h, name, stride, pad):
        w = jnp.transpose(p[f"{name}.weight"], (2, 3, 1, 0)).astype(dtype)  # HWIO
        return lax.conv_general_dilated(
            h, w, (stride, stride), [(pad, pad)] * 2,
            dimension_numbers=("NHWC", "HWIO", "NHWC"), precision=precision,
        )  # fmt: skip

    def bn(h, name):
        scale = p[f"{name}.weight"] / jnp.sqrt(p[f"{name}.running_var"] + EPSILON)
        shift = p[f"{name}.bias"] - p[f"{name}.running_mean"] * scale
        return (h.astype(jnp.float32) * scale + shift).astype(dtype)

    h = jax.nn.relu(bn(conv(h, "conv1", 2, 3), "bn1"))
    h = lax.reduce_window(
        h, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (1, 1), (0, 0)]
    )
    width = p["conv1.weight"].shape[0]
    for name, _, _, stride in resnet_blocks(width, layers):
        y = jax.nn.relu(bn(conv(h, f"{name}.conv1", 1, 0), f"{name}.bn1"))
        y = jax.nn.relu(bn(conv(y, f"{name}.conv2", stride, 1), f"{name}.bn2"))
        y = bn(conv(y, f"{name}.conv3", 1, 0), f"{name}.bn3")
        if name.endswith(".0"):
            h = bn(conv(h, f"{name}.downsample.0", stride, 0), f"{name}.downsample.1")
        h = jax.nn.relu(y + h)
    pooled = jnp.mean(h.astype(jnp.float32), axis=(1, 2))
    logits = jnp.dot(pooled, p["fc.weight"].T, precision=precision) + p["fc.bias"]
    return logits.astype(dtype)


# ---------------------------------------------------------------------------------------------
# GPT-style block stack


def gpt_parameters(d_model: int, ffn: int, layers: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded random parameters (float32, PyTorch names, Linear weights {out, in}): projections
    variance-preserving (std 1/sqrt(fan_in), ``uniform``), the two that write into the residual stream
    scaled by 1/sqrt(2 * layers) as GPT-2 does."""
    rng = np.random.default_rng(seed)
    p: dict[str, np.ndarray] = {}

    def linear(name, out, inp, scale=1.0):
        p[f"{name}.weight"] = uniform(rng, (out, inp), scale / math.sqrt(inp))
        p[f"{name}.bias"] = rng.normal(0.0, 0.02, out).astype(np.float32)

    def norm(name):
        p[f"{name}.weight"] = (1.0 + rng.normal(0.0, 0.1, d_model)).astype(np.float32)
        p[f"{name}.bias"] = rng.normal(0.0, 0.02, d_model).astype(np.float32)

    residual = 1.0 / math.sqrt(2 * layers)
    for i in range(layers):
        block = f"blocks.{i}"
        norm(f"{block}.ln1")
        for proj in ("q", "k", "v"):
            linear(f"{block}.attn.{proj}", d_model, d_model)
        linear(f"{block}.attn.out", d_model, d_model, residual)
        norm(f"{block}.ln2")
        linear(f"{block}.mlp.fc1", ffn, d_model)
        linear(f"{block}.mlp.fc2", d_model, ffn, residual)
    norm("ln_f")
    return p


# Megatron's split: column-parallel projections split their output rows (weight dim 0, bias
# dim 1), row-parallel ones their input columns (weight dim 1; their bias is added after the
# partial sums are reduced, so it stays whole).
_COLUMN_PARALLEL = ("attn.qkv", "attn.q", "attn.k", "attn.v", "mlp.fc1")
_ROW_PARALLEL = ("attn.out", "mlp.fc2")


def stacked_qkv(parameters: dict, block: str, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """The fused QKV projection of ``block`` ({3d, d} weight, {3d} bias) from PyTorch's
    separate q, k and v Linears, its output features in (head, q/k/v, head size) order: the
    projection's {B * S, 3d} output is then MULTIHEAD_ATTENTION's packed {B, S, H, 3, Dh}
    StackedQueryKeyValueTensor, and a contiguous block of rows holds whole heads."""
    names = [f"{block}.attn.{n}" for n in ("q", "k", "v")]
    weight = np.stack([parameters[f"{n}.weight"] for n in names])  # {3, d, d}: {3, H * Dh, d}
    bias = np.stack([parameters[f"{n}.bias"] for n in names])  # {3, H * Dh}
    d = weight.shape[-1]
    weight = weight.reshape(3, heads, d // heads, d).transpose(1, 0, 2, 3).reshape(3 * d, d)
    bias = bias.reshape(3, heads, d // heads).transpose(1, 0, 2).reshape(3 * d)
    return weight, bias


def gpt_stack(
    batch: int = 1,
    seq: int = 1024,
    d_model: int = 1024,
    heads: int = 16,
    layers: int = 12,
    dtype: str = "FLOAT16",
    *,
    ffn: int | None = None,
    seed: int = 0,
    fused_qkv: bool = True,
    mask_input: bool = False,
) -> Network:
    """A pre-LN causal transformer stack on {batch * seq, d_model} token features (the
    embeddings), returning the final layer norm's {batch * seq, d_model}. ``ffn`` defaults to
    ``4 * d_model``. ``fused_qkv``: one GEMM per layer for the queries, keys and values, read by
    the attention as one stacked {B, S, H, 3, Dh} tensor; otherwise three GEMMs whose outputs
    the attention reads as separate {B, S, H * Dh} tensors (dense operands for cuDNN, no copies
    out of the stacked tensor). ``mask_input``: the causal mask as an INT32 {1, 1, S, S} graph
    input (``causal_mask`` in ``weights``, entering through an IDENTITY) instead of a constant
    data node; the attention's fast path then tests it at run time."""
    if d_model % heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of heads ({heads})")
    ffn = 4 * d_model if ffn is None else ffn
    p = gpt_parameters(d_model, ffn, layers, seed)
    b = _Builder(dtype)
    tokens, head = batch * seq, d_model // heads
    rows = T(dtype, (tokens, d_model))
    wide = T(dtype, (tokens, ffn))
    x = b.data("x", rows.sizes)
    # The causal mask, 1 where query i may attend key j <= i (BOOLEAN: a 0 adds
    # MaskFilterValue): one constant data node of S x S INT32 values that every attention node
    # reads as {B, H, S, S} through stride-0 batch and head dimensions.
    causal = np.tril(np.ones((seq, seq), np.int32))
    if mask_input:
        mask_in = T("INT32", (1, 1, seq, seq))
        (mask,) = b.add(_identity(mask_in), b.constant("causal_mask", causal[None, None], "INT32"))
    else:
        mask = b.constant_data(causal)
    shard_dims: dict[str, int] = {}

    def norm(h, name):
        scale = b.constant(f"{name}.weight", p[f"{name}.weight"].reshape(1, d_model))
        shift = b.constant(f"{name}.bias", p[f"{name}.bias"].reshape(1, d_model))
        vec = T(dtype, (1, d_model))
        desc = dml.MeanVarianceNormalization1OperatorDesc(
            rows, vec, vec, rows, axes=(1,), normalize_variance=True, epsilon=EPSILON
        )
        return b.add(desc, h, scale, shift)[0]

    def linear(h, name, in_desc, weight=None, bias=None):
        weight = p[f"{name}.weight"] if weight is None else weight
        bias = (p[f"{name}.bias"] if bias is None else bias).reshape(1, -1)
        w = b.constant(f"{name}.weight", weight)
        (c,) = b.add(_identity(T(dtype, bias.shape)), b.constant(f"{name}.bias", bias))
        out = T(dtype, (tokens, weight.shape[0]))
        c_view = T(dtype, out.sizes, strides=(0, 1))  # the bias row broadcast down the tokens
        kind = ".".join(name.split(".")[-2:])
        if kind in _COLUMN_PARALLEL:
            shard_dims[f"{name}.weight"], shard_dims[f"{name}.bias"] = 0, 1
        elif kind in _ROW_PARALLEL:
            shard_dims[f"{name}.weight"] = 1
        desc = dml.GemmOperatorDesc(
            in_desc, T(dtype, weight.shape), c_view, out, trans_b="TRANSPOSE"
        )
        return b.add(desc, h, w, c)[0]

    # One node per layer: the QKV projection's {B * S, 3d} output read as {B, S, H, 3, Dh}
    # (a reshape), causal through the mask, output {B, S, H * Dh}, read by the output
    # projection as {B * S, d} (a reshape again).
    separate = T(dtype, (batch, seq, d_model))
    inputs = (
        {"stacked_query_key_value_tensor": T(dtype, (batch, seq, heads, 3, head))}
        if fused_qkv
        else {"query_tensor": separate, "key_tensor": separate, "value_tensor": separate}
    )
    attend = dml.MultiheadAttentionOperatorDesc(
        **inputs,
        mask_tensor=T("INT32", (batch, heads, seq, seq), strides=(0, 0, seq, 1)),
        output_tensor=T(dtype, (batch, seq, d_model)),
        scale=1.0 / math.sqrt(head),
        mask_filter_value=-math.inf,
        head_count=heads,
        mask_type="BOOLEAN",
    )
    for i in range(layers):
        block = f"blocks.{i}"
        h = norm(x, f"{block}.ln1")
        if fused_qkv:
            qkv = [linear(h, f"{block}.attn.qkv", rows, *stacked_qkv(p, block, heads))]
        else:
            qkv = [linear(h, f"{block}.attn.{n}", rows) for n in ("q", "k", "v")]
        (o,) = b.add(attend, *qkv, mask)
        a = linear(o, f"{block}.attn.out", rows)
        (x,) = b.add(dml.ElementWiseAddOperatorDesc(rows, rows, rows), x, a)
        h = norm(x, f"{block}.ln2")
        u = linear(h, f"{block}.mlp.fc1", rows)
        (u,) = b.add(dml.ActivationGeluOperatorDesc(wide, wide), u)
        m = linear(u, f"{block}.mlp.fc2", wide)
        (x,) = b.add(dml.ElementWiseAddOperatorDesc(rows, rows, rows), x, m)
    out = norm(x, "ln_f")
    config = {
        "batch": batch, "seq": seq, "d_model": d_model, "heads": heads, "layers": layers,
        "dtype": dtype, "ffn": ffn, "seed": seed, "fused_qkv": fused_qkv,
        "mask_input": mask_input,
    }  # fmt: skip
    return b.network("gpt", [out], {"x": 0}, p, shard_dims, True, config)


def _identity(desc: dml.TensorDesc):
    """ELEMENT_WISE_IDENTITY: how a graph input enters when consumers read it through other
    strides (a broadcast view of a bias or of the mask)."""
    return dml.ElementWiseIdentityOperatorDesc(desc, desc)


def gpt_reference(parameters: dict, x, batch: int, heads: int, layers: int, dtype=jnp.float32):
    """The GPT stack written directly in jnp (no dml_jax): {B * S, d} to {B * S, d}. Layer
    norm and softmax in float32; float32 products at full precision."""
    precision = lax.Precision.HIGHEST if dtype == jnp.float32 else None
    p = {k: jnp.asarray(v, jnp.float32) for k, v in parameters.items()}
    x = jnp.asarray(x, dtype)
    tokens, d = x.shape
    seq, head = tokens // batch, d // heads

    def norm(h, name):
        h = h.astype(jnp.float32)
        mean = h.mean(-1, keepdims=True)
        var = ((h - mean) ** 2).mean(-1, keepdims=True)
        y = (h - mean) / jnp.sqrt(var + EPSILON) * p[f"{name}.weight"] + p[f"{name}.bias"]
        return y.astype(dtype)

    def linear(h, name):
        w = p[f"{name}.weight"].astype(dtype)
        y = jnp.dot(h, w.T, precision=precision).astype(jnp.float32) + p[f"{name}.bias"]
        return y.astype(dtype)

    causal = jnp.tril(jnp.ones((seq, seq), bool))
    for i in range(layers):
        block = f"blocks.{i}"
        h = norm(x, f"{block}.ln1")
        q, k, v = (linear(h, f"{block}.attn.{n}").reshape(batch, seq, heads, head) for n in "qkv")
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k, precision=precision).astype(jnp.float32)
        s = jnp.where(causal, s / math.sqrt(head), -jnp.inf)
        w = jax.nn.softmax(s, axis=-1).astype(dtype)
        o = jnp.einsum("bhqk,bkhd->bqhd", w, v, precision=precision).reshape(tokens, d)
        x = x + linear(o, f"{block}.attn.out")
        h = linear(norm(x, f"{block}.ln2"), f"{block}.mlp.fc1")
        x = x + linear(jax.nn.gelu(h, approximate=False), f"{block}.mlp.fc2")
    return norm(x, "ln_f")


# ---------------------------------------------------------------------------------------------
# Sharding, export


def shardings(net: Network, mesh, data_axis: str | None = None, model_axis: str | None = None):
    """One ``NamedSharding`` per graph input: data inputs split along their batch dimension
    over ``data_axis``, weights split over ``model_axis`` where ``net.shard_dims`` says
    (tensor parallelism), everything else replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    out = []
    for name, desc in zip(net.input_names, net.input_descs):
        spec: list = [None] * desc.rank
        if data_axis is not None and name in net.batch_dims:
            spec[net.batch_dims[name]] = data_axis
        if model_axis is not None and name in net.shard_dims:
            spec[net.shard_dims[name]] = model_axis
        out.append(NamedSharding(mesh, PartitionSpec(*spec)))
    return out


def export_dxdispatch(net: Network, directory, data: dict | None = None) -> Path:
    """Writes ``net`` as a DxDispatch model: ``model.json`` (one DML_GRAPH dispatchable), each
    graph input as ``inputs/<name>.npy`` and commands that dispatch the graph, write its output
    to ``output.npy`` and print it. Run it from ``directory`` with ``dml-jax run model.json``.

    The graph must be valid with exact edges (``net.reinterpret_edges`` False): DxDispatch JSON
    graphs are compiled that way. Returns the model's path.
    """
    if net.reinterpret_edges:
        raise ValueError(f"{net.name}: a graph with reinterpreted edges has no DxDispatch form")
    directory = Path(directory)
    (directory / "inputs").mkdir(parents=True, exist_ok=True)
    values = dict(net.weights, **(data if data is not None else net.example_data()))
    resources = {}
    for name in net.input_names:
        np.save(directory / "inputs" / f"{name}.npy", values[name])
        resources[name] = {"initialValues": {"sourcePath": f"inputs/{name}.npy"}}
    (out_desc,) = dml.compile_graph(net.graph).output_descs
    resources["output"] = {
        "initialValuesDataType": out_desc.data_type.name,
        "initialValues": {"valueCount": math.prod(out_desc.sizes), "value": 0},
    }
    model = {
        "resources": resources,
        "dispatchables": {net.name: dml.graph_to_json(net.graph)},
        "commands": [
            {
                "type": "dispatch",
                "dispatchable": net.name,
                "bindings": {"Inputs": list(net.input_names), "Outputs": ["output"]},
            },
            {
                "type": "writeFile",
                "resource": "output",
                "targetPath": "output.npy",
                "dimensions": list(out_desc.sizes),
            },
            {"type": "print", "resource": "output"},
        ],
    }
    path = directory / "model.json"
    path.write_text(json.dumps(model, indent=1) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# Command line

SMALL_RESNET = {"image": 64, "width": 4, "layers": (2, 1, 1, 1), "classes": 10}
SMALL_GPT = {"seq": 8, "d_model": 32, "heads": 4, "layers": 2}


def _relative_error(got, want) -> float:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    export = sub.add_parser("export", help="write a small ResNet as a DxDispatch model")
    export.add_argument("directory", type=Path)
    args = parser.parse_args(argv)
    if args.command == "export":
        path = export_dxdispatch(resnet50(2, **SMALL_RESNET), args.directory)
        print(f"wrote {path}; run it with: cd {args.directory} && dml-jax run model.json")
        return

    full = resnet50(1)
    ops = {}
    for node in full.graph.nodes:
        ops[node.operator_type] = ops.get(node.operator_type, 0) + 1
    # torchvision counts parameters, not the normalization statistics: 25,557,032.
    count = sum(v.size for k, v in full.parameters.items() if "running" not in k)
    print(f"ResNet-50: {len(full.graph.nodes)} nodes {ops}, {count:,} parameter values")

    resnet = resnet50(2, **SMALL_RESNET)
    x = resnet.example_data()["x"]
    got = np.asarray(resnet.compile()(*resnet.arguments(x=x))).reshape(2, -1)
    want = resnet_reference(resnet.parameters, x, SMALL_RESNET["layers"])
    print(f"small ResNet float32 vs jax reference: relative error {_relative_error(got, want):.2e}")

    gpt = gpt_stack(2, dtype="FLOAT32", **SMALL_GPT)
    x = gpt.example_data()["x"]
    got = gpt.compile()(*gpt.arguments(x=x))
    want = gpt_reference(gpt.parameters, x, 2, SMALL_GPT["heads"], SMALL_GPT["layers"])
    print(
        f"small GPT stack float32 vs jax reference: relative error {_relative_error(got, want):.2e}"
    )


if __name__ == "__main__":
    main()
