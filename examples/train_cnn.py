"""A training step as one DML_GRAPH_DESC: a small CNN's forward pass, its backward pass written
with DirectML's gradient operators, and ADAM_OPTIMIZER, compiled into one XLA program.

The network classifies N synthetic 1-D signals of length L into C classes (``Sizes``; the
example's own are N = 8, L = 8, K = 2, C = 3). The signals are the rows of one {1, 1, N, L}
image, and every layer keeps DirectML's layouts, so no tensor is ever reshaped (dml_jax's graph
edges join equal sizes only):

    x {1, 1, N, L}
      -> CONVOLUTION, K filters 1x3, padded          {1, K, N, L}
      -> BATCH_NORMALIZATION_TRAINING (per channel)  {1, K, N, L}  (+ batch mean, variance)
      -> ACTIVATION_RELU                              {1, K, N, L}
      -> MAX_POOLING 1x2, stride 2                    {1, K, N, F}   F = L / 2
      -> GEMM with W2 {1, K, F, C}                    {1, K, N, C}   a product per channel
      -> REDUCE SUM over the channels                 {1, 1, N, C}   the logits
      -> ACTIVATION_LOG_SOFTMAX, ELEMENT_WISE_MULTIPLY by the one-hot labels, REDUCE SUM,
         ELEMENT_WISE_IDENTITY * -1/N                 {1, 1, 1, 1}   the cross-entropy loss

The backward pass, node by node: the loss's gradient (softmax - labels) / N from ACTIVATION_SOFTMAX,
ELEMENT_WISE_SUBTRACT and a ScaleBias; TILE back over the channels; two GEMMs (dW2 = P^T dG and
dP = dG W2^T); MAX_POOLING_GRAD; ACTIVATION_RELU_GRAD; BATCH_NORMALIZATION_TRAINING_GRAD (input,
scale and bias gradients); and for the filter (DirectML has no filter-gradient operator) the
gradient channel by channel as a CONVOLUTION of the input with that channel's gradient, SPLIT
before and JOINed after. Four ADAM_OPTIMIZER nodes then update W1, the scale, the bias and W2.

The same step computed with ``jax.grad`` of the forward graph and the same ADAM_OPTIMIZER
operator gives the same parameters to float32 accuracy (tests/test_training_graph.py).
Run ``python examples/train_cnn.py``: it trains both ways and prints the losses
(``dml-jax bench --suite training`` times the same step at a larger size).
"""

from __future__ import annotations

import functools
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

from dml_jax.fields import INPUT, OUTPUT

LEARNING_RATE, BETA1, BETA2, EPSILON = 0.05, 0.9, 0.999, 1e-7

T = dml.TensorDesc
SCALAR = T("FLOAT32", (1, 1, 1, 1))
STEP = T("UINT32", (1, 1, 1, 1))
PARAMETERS = ("W1", "scale", "bias", "W2")


@dataclass(frozen=True)
class Sizes:
    """The network's sizes: N signals (the batch) of L samples (even), K filters, CLASSES
    classes; the tensor descriptions follow from them."""

    n: int = 8
    length: int = 8
    k: int = 2
    classes: int = 3

    @functools.cached_property
    def descs(self) -> dict[str, dml.TensorDesc]:
        n, length, k, c = self.n, self.length, self.k, self.classes
        f = length // 2
        return {
            "x": T("FLOAT32", (1, 1, n, length)),
            "labels": T("FLOAT32", (1, 1, n, c)),
            "W1": T("FLOAT32", (k, 1, 1, 3)),
            "channel": T("FLOAT32", (1, k, 1, 1)),
            "W2": T("FLOAT32", (1, k, f, c)),
            "features": T("FLOAT32", (1, k, n, length)),
            "pooled": T("FLOAT32", (1, k, n, f)),
            "per_channel": T("FLOAT32", (1, k, n, c)),
            "logits": T("FLOAT32", (1, 1, n, c)),
        }

    @property
    def parameter_descs(self) -> tuple[dml.TensorDesc, ...]:
        d = self.descs
        return (d["W1"], d["channel"], d["channel"], d["W2"])


SMALL = Sizes()  # the example's own sizes (and the test suite's)


class GraphBuilder:
    """Nodes added one at a time, wired by handles: ``("input", i)`` for graph input i, ``(n,
    k)`` for output k of node n. Inputs are given in the order of the node's present input
    tensors; DirectML's edge indices (which count absent optional tensors) are derived."""

    def __init__(self, inputs: list[str]):
        self.inputs = {name: ("input", i) for i, name in enumerate(inputs)}
        self.nodes: list = []
        self.input_edges: list = []
        self.intermediate_edges: list = []
        self.outputs: list = []

    def input(self, name: str) -> tuple:
        """Adds graph input ``name`` after the existing ones; returns its handle."""
        if name in self.inputs:
            raise ValueError(f"graph input {name!r} already exists")
        self.inputs[name] = ("input", len(self.inputs))
        return self.inputs[name]

    def constant_data(self, value) -> tuple:
        """Adds a ConstantDataNode holding ``value``'s bytes (C order); returns its handle.
        Each consumer reads the bytes through its own tensor desc."""
        self.nodes.append(dml.ConstantDataNode(value))
        return (len(self.nodes) - 1, 0)

    def add(self, desc, *sources) -> list:
        node = len(self.nodes)
        slots = [i for i, (_, t) in enumerate(desc.edge_slots(INPUT)) if t is not None]
        assert len(slots) == len(sources), (desc.operator_type, len(slots), len(sources))
        for slot, source in zip(slots, sources):
            source = self.inputs.get(source, source)
            if source[0] == "input":
                self.input_edges.append(dml.InputGraphEdge(source[1], node, slot))
            else:
                self.intermediate_edges.append(dml.IntermediateGraphEdge(*source, node, slot))
        self.nodes.append(desc)
        return [(node, i) for i, (_, t) in enumerate(desc.edge_slots(OUTPUT)) if t is not None]

    def graph(self, outputs: list) -> dml.GraphDesc:
        edges = [dml.OutputGraphEdge(*handle, j) for j, handle in enumerate(outputs)]
        return dml.GraphDesc(
            len(self.inputs),
            len(outputs),
            self.nodes,
            self.input_edges,
            edges,
            self.intermediate_edges,
        )


def _convolve_x(s: Sizes, filter_tensor: dml.TensorDesc, output_tensor: dml.TensorDesc):
    """A cross-correlation of the input x with a filter, padded by 1 on both sides of L."""
    return dml.ConvolutionOperatorDesc(
        s.descs["x"],
        filter_tensor,
        None,
        output_tensor,
        strides=[1, 1],
        dilations=[1, 1],
        start_padding=[0, 1],
        end_padding=[0, 1],
        output_padding=[0, 0],
    )


def _forward(b: GraphBuilder, s: Sizes) -> dict:
    """The forward nodes; returns the handles the backward pass reads."""
    d = s.descs
    W1, W2, FEATURES, CHANNEL, POOLED, PER_CHANNEL, LOGITS = (
        d[name] for name in ("W1", "W2", "features", "channel", "pooled", "per_channel", "logits")
    )
    (conv,) = b.add(_convolve_x(s, W1, FEATURES), "x", "W1")
    bn, mean, variance = b.add(
        dml.BatchNormalizationTrainingOperatorDesc(
            FEATURES, CHANNEL, CHANNEL, None, FEATURES, CHANNEL, CHANNEL, epsilon=1e-3
        ),
        conv,
        "scale",
        "bias",
    )
    (relu,) = b.add(dml.ActivationReluOperatorDesc(FEATURES, FEATURES), bn)
    window = {
        "strides": [1, 2],
        "window_size": [1, 2],
        "start_padding": [0, 0],
        "end_padding": [0, 0],
    }
    (pooled,) = b.add(dml.MaxPoolingOperatorDesc(FEATURES, POOLED, **window), relu)
    (per_channel,) = b.add(dml.GemmOperatorDesc(POOLED, W2, None, PER_CHANNEL), pooled, "W2")
    (logits,) = b.add(dml.ReduceOperatorDesc("SUM", PER_CHANNEL, LOGITS, axes=[1]), per_channel)
    (log_p,) = b.add(dml.ActivationLogSoftmaxOperatorDesc(LOGITS, LOGITS), logits)
    (picked,) = b.add(dml.ElementWiseMultiplyOperatorDesc(LOGITS, LOGITS, LOGITS), "labels", log_p)
    (total,) = b.add(dml.ReduceOperatorDesc("SUM", LOGITS, SCALAR, axes=[2, 3]), picked)
    (loss,) = b.add(
        dml.ElementWiseIdentityOperatorDesc(SCALAR, SCALAR, dml.ScaleBias(-1.0 / s.n, 0.0)), total
    )
    return {
        "conv": conv,
        "bn": bn,
        "mean": mean,
        "variance": variance,
        "relu": relu,
        "pooled": pooled,
        "logits": logits,
        "loss": loss,
        "window": window,
    }


def _backward(b: GraphBuilder, f: dict, s: Sizes) -> list:
    """The gradient nodes; returns the handles of dW1, dscale, dbias, dW2."""
    d = s.descs
    FEATURES, CHANNEL, POOLED, PER_CHANNEL, LOGITS, W2 = (
        d[name] for name in ("features", "channel", "pooled", "per_channel", "logits", "W2")
    )
    (p,) = b.add(dml.ActivationSoftmaxOperatorDesc(LOGITS, LOGITS), f["logits"])
    (diff,) = b.add(dml.ElementWiseSubtractOperatorDesc(LOGITS, LOGITS, LOGITS), p, "labels")
    (d_logits,) = b.add(
        dml.ElementWiseIdentityOperatorDesc(LOGITS, LOGITS, dml.ScaleBias(1.0 / s.n, 0.0)), diff
    )
    (d_per_channel,) = b.add(dml.TileOperatorDesc(LOGITS, PER_CHANNEL, [1, s.k, 1, 1]), d_logits)
    (d_w2,) = b.add(
        dml.GemmOperatorDesc(POOLED, PER_CHANNEL, None, W2, trans_a="TRANSPOSE"),
        f["pooled"],
        d_per_channel,
    )
    (d_pooled,) = b.add(
        dml.GemmOperatorDesc(PER_CHANNEL, W2, None, POOLED, trans_b="TRANSPOSE"),
        d_per_channel,
        "W2",
    )
    (d_relu,) = b.add(
        dml.MaxPoolingGradOperatorDesc(FEATURES, POOLED, FEATURES, **f["window"], dilations=[1, 1]),
        f["relu"],
        d_pooled,
    )
    (d_bn,) = b.add(
        dml.ActivationReluGradOperatorDesc(FEATURES, FEATURES, FEATURES), f["bn"], d_relu
    )
    d_conv, d_scale, d_bias = b.add(
        dml.BatchNormalizationTrainingGradOperatorDesc(
            FEATURES, FEATURES, CHANNEL, CHANNEL, CHANNEL, FEATURES, CHANNEL, CHANNEL, epsilon=1e-3
        ),
        f["conv"],
        d_bn,
        f["mean"],
        f["variance"],
        "scale",
    )
    # dW1[k, 0, 0, j] = sum over n, l of d_conv[0, k, n, l] * x_padded[0, 0, n, l + j]: a
    # convolution of the input with channel k's gradient as its filter.
    one, taps = d["x"], T("FLOAT32", (1, 1, 1, 3))
    channels = b.add(dml.SplitOperatorDesc(FEATURES, [one] * s.k, axis=1), d_conv)
    pieces = [b.add(_convolve_x(s, one, taps), "x", channel)[0] for channel in channels]
    (d_w1,) = b.add(dml.JoinOperatorDesc([taps] * s.k, d["W1"], axis=0), *pieces)
    return [d_w1, d_scale, d_bias, d_w2]


def adam_desc(
    t: dml.TensorDesc, learning_rate: float = LEARNING_RATE
) -> dml.AdamOptimizerOperatorDesc:
    """One ADAM_OPTIMIZER step of a parameter tensor ``t``, with the example's hyper-parameters."""
    return dml.AdamOptimizerOperatorDesc(
        t,
        t,
        t,
        t,
        STEP,
        t,
        t,
        t,
        learning_rate=learning_rate,
        beta1=BETA1,
        beta2=BETA2,
        epsilon=EPSILON,
    )


_DATA_INPUTS = ["x", "labels", *PARAMETERS]


def training_graph(sizes: Sizes = SMALL, learning_rate: float = LEARNING_RATE) -> dml.GraphDesc:
    """Inputs: x, labels, the four parameters, their first moments, their second moments, the
    training step. Outputs: the loss (before the step), then the updated parameters, first
    moments and second moments."""
    names = _DATA_INPUTS + [f"m_{p}" for p in PARAMETERS] + [f"v_{p}" for p in PARAMETERS]
    b = GraphBuilder(names + ["step"])
    grads = _backward(b, f := _forward(b, sizes), sizes)
    updated = [
        b.add(adam_desc(t, learning_rate), p, f"m_{p}", f"v_{p}", g, "step")
        for p, t, g in zip(PARAMETERS, sizes.parameter_descs, grads)
    ]
    return b.graph([f["loss"]] + [u[i] for i in range(3) for u in updated])


def gradient_graph(sizes: Sizes = SMALL) -> dml.GraphDesc:
    """The training graph without its ADAM_OPTIMIZER nodes: outputs the loss and the four
    gradients."""
    b = GraphBuilder(_DATA_INPUTS)
    grads = _backward(b, f := _forward(b, sizes), sizes)
    return b.graph([f["loss"]] + grads)


def loss_graph(sizes: Sizes = SMALL) -> dml.GraphDesc:
    """The forward nodes only: inputs x, labels and the parameters, output the loss."""
    b = GraphBuilder(_DATA_INPUTS)
    return b.graph([_forward(b, sizes)["loss"]])


def synthetic_data(seed: int = 0, sizes: Sizes = SMALL) -> tuple[np.ndarray, np.ndarray]:
    """N signals: class c is a sine of frequency c + 1 with a random phase, plus noise."""
    rng = np.random.default_rng(seed)
    n, length = sizes.n, sizes.length
    classes = np.arange(n) % sizes.classes
    t = np.arange(length) / length
    phase = rng.uniform(0, 2 * np.pi, n)
    x = np.sin(2 * np.pi * (classes[:, None] + 1) * t[None] + phase[:, None])
    x = x + 0.1 * rng.standard_normal((n, length))
    labels = np.eye(sizes.classes)[classes]
    d = sizes.descs
    return (
        x.reshape(d["x"].sizes).astype(np.float32),
        labels.reshape(d["labels"].sizes).astype(np.float32),
    )


def initial_parameters(seed: int = 1, sizes: Sizes = SMALL) -> list[np.ndarray]:
    """W1 and W2 normal (W2 with He's scale sqrt(2 / fan-in): 0.5 at the example's sizes), the
    batch normalization's scale 1 and bias 0."""
    rng = np.random.default_rng(seed)
    w1, channel, _, w2 = (t.sizes for t in sizes.parameter_descs)
    fan_in = sizes.k * (sizes.length // 2)
    return [
        (rng.standard_normal(w1) * 0.5).astype(np.float32),
        np.ones(channel, np.float32),
        np.zeros(channel, np.float32),
        (rng.standard_normal(w2) * np.sqrt(2.0 / fan_in)).astype(np.float32),
    ]


def train_with_dml_gradients(steps: int, x, labels, parameters, sizes: Sizes = SMALL):
    """``steps`` runs of the training graph; returns (losses, parameters)."""
    graph = dml.compile_graph(training_graph(sizes))
    first = [np.zeros_like(p) for p in parameters]
    second = [np.zeros_like(p) for p in parameters]
    losses = []
    for t in range(1, steps + 1):
        step = np.full(STEP.sizes, t, np.uint32)  # Adam counts steps from 1
        out = graph(x, labels, *parameters, *first, *second, step)
        losses.append(float(np.asarray(out[0]).reshape(())))
        parameters, first, second = (list(out[1 + 4 * i : 5 + 4 * i]) for i in range(3))
    return losses, [np.asarray(p) for p in parameters]


def train_with_jax_grad(steps: int, x, labels, parameters, sizes: Sizes = SMALL):
    """The same training with ``jax.grad`` of the forward graph and the ADAM_OPTIMIZER
    operator; returns (losses, parameters)."""
    loss = dml.compile_graph(loss_graph(sizes))
    value_and_grad = jax.jit(
        jax.value_and_grad(lambda params: loss.fn(x, labels, *params).reshape(()))
    )
    adam = [dml.compile_operator(adam_desc(t)) for t in sizes.parameter_descs]
    first = [np.zeros_like(p) for p in parameters]
    second = [np.zeros_like(p) for p in parameters]
    losses = []
    for t in range(1, steps + 1):
        step = np.full(STEP.sizes, t, np.uint32)
        value, grads = value_and_grad(list(parameters))
        losses.append(float(value))
        updated = [
            op(p, m, v, g, step) for op, p, m, v, g in zip(adam, parameters, first, second, grads)
        ]
        parameters, first, second = (list(column) for column in zip(*updated))
    return losses, [np.asarray(p) for p in parameters]


def main(steps: int = 10) -> None:
    x, labels = synthetic_data()
    start = initial_parameters()
    graph = training_graph()
    print(
        f"training graph: {len(graph.nodes)} nodes, {graph.input_count} inputs, "
        f"{graph.output_count} outputs"
    )
    dml_losses, dml_params = train_with_dml_gradients(steps, x, labels, start)
    jax_losses, jax_params = train_with_jax_grad(steps, x, labels, start)
    print("step  loss (DirectML gradient operators)  loss (jax.grad)")
    for i, (a, b) in enumerate(zip(dml_losses, jax_losses), 1):
        print(f"{i:4d}  {a:34.6f}  {b:15.6f}")
    worst = max(float(np.max(np.abs(a - b))) for a, b in zip(dml_params, jax_params))
    print(f"largest parameter difference after {steps} steps: {worst:.2e}")
    assert dml_losses[-1] < dml_losses[0] and jax_losses[-1] < jax_losses[0]
    assert worst < 1e-4
    print("both ways train, to the same parameters")


if __name__ == "__main__":
    main()
