"""Recurrent layers: RNN, GRU and LSTM onto DirectML's RNN, GRU and LSTM operators, as ONNX
Runtime's DirectML provider binds them (DmlOperatorRecurrentNeuralNetwork.cpp).

ONNX's tensors keep their layout and gate order (W[iofc] / W[zrh], B = [Wb, Rb], P[iof] are
DirectML's too), each with leading dimensions of 1 up to DirectML's 4-D: X {1, seq, batch,
input}, W / R {1, D, G * hidden, ...}, B and P {1, 1, D, ...}, initial_h / initial_c {1, D,
batch, hidden}, sequence_lens {1, 1, 1, batch}; Y {seq, D, batch, hidden} is already DirectML's
OutputSequenceTensor and Y_h / Y_c are the single outputs without their leading 1. DirectML's
inputs come in another order (HiddenInit before SequenceLengths), and it reads sequence_lens as
UINT32 (the provider forces the unsigned type of the same bits: a CAST here, since a graph edge
keeps one data type).

``layout`` 1 (batch first, opset 14) has no DirectML member: X, initial_h and initial_c are read
through permuted strides, and Y, Y_h and Y_c are transposed back by an identity that reads
permuted strides (the Transpose converter's form).

``activations`` (default sigmoid / tanh / tanh per direction) become activation descs whose
alpha / beta come, in order, from ``activation_alpha`` / ``activation_beta`` for the functions
that have them, ONNX's defaults when the lists run out (the provider's reading). Affine, which
the provider rejects, is DirectML's ACTIVATION_LINEAR. ``clip`` is LSTM's ClipThreshold;
DirectML's RNN and GRU have none, so a clip there is refused rather than dropped.
"""

from __future__ import annotations

from ...tensor import TensorDesc, packed_strides
from ..importer import Value, packed
from . import converter
from ._common import DataType, cast_value, op

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {
    "RNN": ("Tanh",),
    "GRU": ("Sigmoid", "Tanh"),
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
}
DIRECTIONS = {"forward": "FORWARD", "reverse": "BACKWARD", "bidirectional": "BIDIRECTIONAL"}

# ONNX activation name (lower case) -> (DML operator, [(field, ONNX default)] for alpha, then
# beta). ONNX's defaults are those of the ONNX operator of that name.
_ACTIVATIONS = {
    "relu": ("ACTIVATION_RELU", [], []),
    "tanh": ("ACTIVATION_TANH", [], []),
    "sigmoid": ("ACTIVATION_SIGMOID", [], []),
    "affine": ("ACTIVATION_LINEAR", [("alpha", 1.0)], [("beta", 0.0)]),
    "leakyrelu": ("ACTIVATION_LEAKY_RELU", [("alpha", 0.01)], []),
    "thresholdedrelu": ("ACTIVATION_THRESHOLDED_RELU", [("alpha", 1.0)], []),
    "scaledtanh": ("ACTIVATION_SCALED_TANH", [("alpha", 1.0)], [("beta", 1.0)]),
    "hardsigmoid": ("ACTIVATION_HARD_SIGMOID", [("alpha", 0.2)], [("beta", 0.5)]),
    "elu": ("ACTIVATION_ELU", [("alpha", 1.0)], []),
    "softsign": ("ACTIVATION_SOFTSIGN", [], []),
    "softplus": ("ACTIVATION_SOFTPLUS", [], []),
}


def _activation_descs(ctx, family: str, directions: int) -> list:
    """The ActivationDescs: each direction's functions in turn, alpha / beta taken in order."""
    names = list(ctx.attr("activations", []) or [])
    per = len(DEFAULT_ACTIVATIONS[family])
    want = per * directions
    if not names:
        names = list(DEFAULT_ACTIVATIONS[family]) * directions
    if len(names) < want:
        raise ctx.fail(
            f"activations must name {want} functions ({per} per direction), got {len(names)}"
        )
    alphas = [float(a) for a in ctx.attr("activation_alpha", []) or []]
    betas = [float(b) for b in ctx.attr("activation_beta", []) or []]
    descs = []
    for name in names[:want]:
        entry = _ACTIVATIONS.get(str(name).lower())
        if entry is None:
            raise ctx.fail(f"activation '{name}' is not supported")
        kind, alpha_fields, beta_fields = entry
        fields = {}
        for field, default in alpha_fields:
            fields[field] = alphas.pop(0) if alphas else default
        for field, default in beta_fields:
            fields[field] = betas.pop(0) if betas else default
        if kind == "ACTIVATION_SOFTPLUS":
            fields["steepness"] = 1.0
        descs.append(op(kind)(**fields))
    return descs


def _read(value: Value, dims: tuple[int, ...], perm: tuple[int, ...] | None = None) -> TensorDesc:
    """The 4-D desc ``dims`` reading ``value``'s packed data: leading dimensions of 1, then
    ``value``'s axes in ``perm`` order (a transpose by strides)."""
    perm = tuple(range(value.rank)) if perm is None else perm
    own = packed_strides(value.shape)
    lead = 4 - len(perm)
    strides = (0,) * lead + tuple(own[p] for p in perm)
    if strides[lead:] == packed_strides(dims)[lead:]:
        return TensorDesc(value.data_type, dims)
    return TensorDesc(value.data_type, dims, strides=packed_strides(dims)[:lead] + strides[lead:])


def _transposed(ctx, value: Value, perm: tuple[int, ...]) -> Value:
    """``value`` transposed by ``perm``: an identity reading permuted strides."""
    strides = packed_strides(value.shape)
    shape = tuple(value.shape[p] for p in perm)
    source = TensorDesc(value.data_type, shape, strides=tuple(strides[p] for p in perm))
    desc = op("ELEMENT_WISE_IDENTITY")(source, packed(value.data_type, shape))
    return ctx.out(ctx.node(desc, [value]), shape)


def _recurrent(family: str):
    def convert(ctx, node, inputs):
        inputs = list(inputs) + [None] * (8 - len(inputs))
        x, w, r, b, lengths, h0 = inputs[:6]
        c0, peephole = inputs[6:8] if family == "LSTM" else (None, None)
        direction = ctx.attr("direction", "forward")
        if direction not in DIRECTIONS:
            raise ctx.fail(f"direction '{direction}' is not one of {sorted(DIRECTIONS)}")
        dirs = 2 if direction == "bidirectional" else 1
        layout = int(ctx.attr("layout", 0))
        if layout not in (0, 1):
            raise ctx.fail(f"layout must be 0 or 1, got {layout}")
        if x.rank != 3:
            raise ctx.fail(f"X must be 3-D, got shape {list(x.shape)}")
        seq, batch, size = (x.shape[1], x.shape[0], x.shape[2]) if layout else x.shape
        gates = GATES[family]
        hidden = r.shape[-1] if r.rank == 3 else 0
        if ctx.attr("hidden_size") is not None and int(ctx.attr("hidden_size")) != hidden:
            raise ctx.fail(f"hidden_size {ctx.attr('hidden_size')} differs from R's {hidden}")
        want = {
            "W": (w, (dirs, gates * hidden, size)),
            "R": (r, (dirs, gates * hidden, hidden)),
            "B": (b, (dirs, 2 * gates * hidden)),
            "sequence_lens": (lengths, (batch,)),
            "initial_h": (h0, (batch, dirs, hidden) if layout else (dirs, batch, hidden)),
            "initial_c": (c0, (batch, dirs, hidden) if layout else (dirs, batch, hidden)),
            "P": (peephole, (dirs, 3 * hidden)),
        }
        for name, (v, shape) in want.items():
            if v is not None and tuple(v.shape) != shape:
                raise ctx.fail(f"{name} must have shape {list(shape)}, got {list(v.shape)}")
        extra = {}
        if family == "LSTM":
            clip = ctx.attr("clip")
            extra["use_clip_threshold"] = clip is not None
            extra["clip_threshold"] = float(clip or 0.0)
            extra["couple_input_forget"] = bool(ctx.attr("input_forget", 0))
        elif ctx.attr("clip") is not None:
            raise ctx.fail(f"clip is not supported: DirectML's {family} has no clip threshold")
        if family == "GRU":
            extra["linear_before_reset"] = bool(ctx.attr("linear_before_reset", 0))

        state = (1, dirs, batch, hidden)
        swap = (1, 0, 2) if layout else None
        fields = {
            "input_tensor": _read(x, (1, seq, batch, size), swap),
            "weight_tensor": _read(w, (1,) + w.shape),
            "recurrence_tensor": _read(r, (1,) + r.shape),
            "bias_tensor": None if b is None else _read(b, (1, 1) + b.shape),
            "hidden_init_tensor": None if h0 is None else _read(h0, state, swap),
        }
        if lengths is not None:
            lengths = cast_value(ctx, lengths, DataType.UINT32)
            fields["sequence_lengths_tensor"] = _read(lengths, (1, 1, 1, batch))
        feeds = [x, w, r, b, h0]
        if family == "LSTM":
            fields["cell_mem_init_tensor"] = None if c0 is None else _read(c0, state, swap)
            fields["peephole_tensor"] = (
                None if peephole is None else _read(peephole, (1, 1) + peephole.shape)
            )
            feeds += [c0, lengths, peephole]
        else:
            feeds += [lengths]
        t = x.data_type
        names = ["output_sequence_tensor", "output_single_tensor", "output_cell_single_tensor"]
        count = 3 if family == "LSTM" else 2
        for k in range(count):
            if ctx.wants(k):
                fields[names[k]] = TensorDesc(t, (seq, dirs, batch, hidden) if k == 0 else state)
        if not any(ctx.wants(k) for k in range(count)):
            raise ctx.fail("at least one output must be asked for")
        desc = op(family)(
            **fields,
            activation_descs=_activation_descs(ctx, family, dirs),
            direction=DIRECTIONS[direction],
            **extra,
        )
        n = ctx.node(desc, feeds)
        outputs = []
        for k in range(count):
            if not ctx.wants(k):
                outputs.append(None)
                continue
            if k == 0:
                y = ctx.out(n, (seq, dirs, batch, hidden), k)
                outputs.append(_transposed(ctx, y, (2, 0, 1, 3)) if layout else y)
            else:
                y = ctx.out(n, (dirs, batch, hidden), k)
                outputs.append(_transposed(ctx, y, (1, 0, 2)) if layout else y)
        return outputs

    return convert


for _family in GATES:
    converter(_family)(_recurrent(_family))
