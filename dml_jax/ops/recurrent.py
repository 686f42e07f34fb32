"""Recurrent layers: DML_OPERATOR_RNN, DML_OPERATOR_LSTM and DML_OPERATOR_GRU (FL 1_0).

Layouts (DirectML's pages; ONNX's tensors with leading dimensions of 1, which is how ONNX
Runtime's DirectML provider binds ONNX's RNN / LSTM / GRU, gate order included). D is the number
of directions (2 for BIDIRECTIONAL, forward first, else 1) and G the number of gates (RNN 1;
LSTM 4 in the order i, o, f, c; GRU 3 in the order z, r, h):

    InputTensor                 {1, seq_length, batch_size, input_size}
    WeightTensor                {1, D, G * hidden_size, input_size}
    RecurrenceTensor            {1, D, G * hidden_size, hidden_size}
    BiasTensor                  {1, 1, D, 2 * G * hidden_size}: every gate's W bias, then R's
    HiddenInitTensor            {1, D, batch_size, hidden_size} (LSTM's CellMemInitTensor too)
    SequenceLengthsTensor       {1, 1, 1, batch_size}, UINT32
    PeepholeTensor (LSTM)       {1, 1, D, 3 * hidden_size}, gates i, o, f
    OutputSequenceTensor        {seq_length, D, batch_size, hidden_size}
    OutputSingleTensor          {1, D, batch_size, hidden_size} (OutputCellSingleTensor too)

One step of one direction, with H and C the state before it (HiddenInit / CellMemInit, or 0,
at the first step):

    RNN   H' = f(X W^T + H R^T + Wb + Rb)
    LSTM  i = f(clip(X Wi^T + H Ri^T + Pi * C + Wbi + Rbi))
          f = f(clip(X Wf^T + H Rf^T + Pf * C + Wbf + Rbf))   (1 - i with CoupleInputForget)
          c = g(clip(X Wc^T + H Rc^T + Wbc + Rbc))
          C' = f * C + i * c
          o = f(clip(X Wo^T + H Ro^T + Po * C' + Wbo + Rbo))  (the new cell: ONNX's equation)
          H' = o * h(C')
    GRU   z = f(X Wz^T + H Rz^T + Wbz + Rbz);  r = f(X Wr^T + H Rr^T + Wbr + Rbr)
          h = g(X Wh^T + (r * H) Rh^T + Rbh + Wbh)
              (LinearBeforeReset: g(X Wh^T + r * (H Rh^T + Rbh) + Wbh))
          H' = (1 - z) * h + z * H

``clip`` bounds to [-ClipThreshold, ClipThreshold] when UseClipThreshold. ActivationDescs holds
each direction's activations in turn: (f) for RNN, (f, g, h) for LSTM, (f, g) for GRU.

Sequence lengths (docs/semantics.md, "Recurrent layers"): a batch entry of length L runs L steps
(FORWARD: t = 0 .. L-1; BACKWARD: t = L-1 .. 0); OutputSequenceTensor is 0 at its steps t >= L
and the single outputs hold the state after its last step. A length beyond seq_length reads as
seq_length; a length of 0 runs no step (zeros in the sequence, the initial state in the single
outputs).

Lowering: X W^T of every step is one product before the loop (FLOAT16 operands, float32
accumulation); the loop is one ``lax.scan`` that carries the state of every direction at once
({D, batch_size, hidden_size}), unrolled by ``_UNROLL`` steps. A BACKWARD direction reads each
sequence reversed within its length, so every direction walks its own steps 0, 1, ... in the
same loop; its outputs are put back in time order afterwards. FLOAT16 computes in float32 (the
carried state included) and rounds once at the outputs; its state enters the recurrent products
as three float16 pieces (``_matmul``: the float32 product on float16 arithmetic, one rounded
piece where half precision is allowed). FLOAT32 products are float32 (``lax.Precision.HIGHEST``
unless half precision is allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import DataType, TensorFlags
from ..enums import FeatureLevel as L
from ..enums import RecurrentNetworkDirection as Direction
from ..errors import Validator
from ..fields import (
    BOOL,
    FLOAT,
    INPUT,
    OPERATOR_DESC_ARRAY,
    OUTPUT,
    OperatorDesc,
    attribute,
    count_of,
    dml_member_name,
    enum_type,
    input_field,
    output_field,
)
from ..fused import check_kind, filled, validate_nested
from ..precision import matmul_precision, pieces_product
from ..registry import Example, lookup, operators, register
from ..support import DIMS4, F2, rows, types
from ..tensor import TensorDesc
from ._common import wide

# Steps per iteration of the loop: more work between the loop's branches for XLA to schedule
# (the attention_lstm bench suite); the steps and their results are the same for any value.
_UNROLL = 8

_SUPPORT = rows((L.FL_1_0, DIMS4, F2, F2, {"SequenceLengthsTensor": types("UINT32")}))

# Activations that are not element-wise: the normalizing ones work across a dimension, and
# PARAMETERIZED_RELU needs a slope tensor that an ActivationDescs entry cannot bind.
_NOT_ELEMENT_WISE = frozenset(
    f"DML_OPERATOR_ACTIVATION_{name}"
    for name in (
        "SOFTMAX",
        "SOFTMAX1",
        "LOG_SOFTMAX",
        "LOG_SOFTMAX1",
        "HARDMAX",
        "HARDMAX1",
        "PARAMETERIZED_RELU",
    )
)


def element_wise_activations() -> list[str]:
    """The operator types an ActivationDescs entry may have: every registered element-wise
    activation (dml_jax's rule; DirectML's pages do not list them), sorted."""
    return sorted(
        s.name for s in operators() if s.desc_class.activation and s.name not in _NOT_ELEMENT_WISE
    )


class _Family(NamedTuple):
    """What distinguishes RNN, LSTM and GRU for validation and lowering."""

    gates: int
    functions: tuple[str, ...]  # the activations of one direction, in ActivationDescs order
    cell: Any  # cell(d, acts, xw, h, c, r: _Recurrence, rb, peephole) -> (h', c')


# ---------------------------------------------------------------------------------------------
# Descriptors


@dataclass(frozen=True)
class RnnOperatorDesc(OperatorDesc):
    """DML_RNN_OPERATOR_DESC: a one-layer simple recurrent network, ``H = f(X W^T + H R^T + Wb
    + Rb)`` at each step, forward, backward or both (FL 1_0).

    Fields:
        input_tensor: {1, seq_length, batch_size, input_size}.
        weight_tensor: {1, num_directions, hidden_size, input_size}.
        recurrence_tensor: {1, num_directions, hidden_size, hidden_size}.
        bias_tensor: optional {1, 1, num_directions, 2 * hidden_size} (Wb, then Rb); 0 if null.
        hidden_init_tensor: optional {1, num_directions, batch_size, hidden_size}; 0 if null.
        sequence_lengths_tensor: optional UINT32 {1, 1, 1, batch_size}; seq_length if null.
        output_sequence_tensor: optional {seq_length, num_directions, batch_size, hidden_size}.
        output_single_tensor: optional {1, num_directions, batch_size, hidden_size}, the last
            state; at least one output is required. Every float tensor has one data type.
        activation_descs: f per direction (element-wise activations, tensors left None).
        direction: ``RecurrentNetworkDirection`` (default FORWARD).
        activation_desc_count: optional; the length of ``activation_descs``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RNN"
    input_tensor: TensorDesc = input_field()
    weight_tensor: TensorDesc = input_field()
    recurrence_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc | None = input_field(optional=True)
    hidden_init_tensor: TensorDesc | None = input_field(optional=True)
    sequence_lengths_tensor: TensorDesc | None = input_field(optional=True)
    output_sequence_tensor: TensorDesc | None = output_field(optional=True)
    output_single_tensor: TensorDesc | None = output_field(optional=True)
    activation_descs: tuple = attribute(OPERATOR_DESC_ARRAY)
    direction: Direction = attribute(enum_type(Direction), default=Direction.FORWARD)
    activation_desc_count: int | None = count_of("activation_descs")


@dataclass(frozen=True)
class LstmOperatorDesc(OperatorDesc):
    """DML_LSTM_OPERATOR_DESC: a one-layer long short-term memory layer with optional
    peepholes, clipping and input-forget coupling, forward, backward or both (FL 1_0).

    Fields:
        input_tensor: {1, seq_length, batch_size, input_size}.
        weight_tensor: {1, num_directions, 4 * hidden_size, input_size}, gates i, o, f, c.
        recurrence_tensor: {1, num_directions, 4 * hidden_size, hidden_size}.
        bias_tensor: optional {1, 1, num_directions, 8 * hidden_size} (Wb[iofc], Rb[iofc]).
        hidden_init_tensor, cell_mem_init_tensor: optional {1, num_directions, batch_size,
            hidden_size}; 0 if null.
        sequence_lengths_tensor: optional UINT32 {1, 1, 1, batch_size}.
        peephole_tensor: optional {1, 1, num_directions, 3 * hidden_size} (P[iof]); 0 if null.
        output_sequence_tensor: optional {seq_length, num_directions, batch_size, hidden_size}.
        output_single_tensor, output_cell_single_tensor: optional {1, num_directions,
            batch_size, hidden_size}, the last hidden state and cell; at least one output.
        activation_descs: f, g, h per direction.
        direction: ``RecurrentNetworkDirection`` (default FORWARD).
        clip_threshold: gate inputs are clipped to [-ClipThreshold, ClipThreshold] (>= 0) when
            use_clip_threshold (default FALSE).
        couple_input_forget: the forget gate is 1 - i (default FALSE).
        activation_desc_count: optional; the length of ``activation_descs``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_LSTM"
    input_tensor: TensorDesc = input_field()
    weight_tensor: TensorDesc = input_field()
    recurrence_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc | None = input_field(optional=True)
    hidden_init_tensor: TensorDesc | None = input_field(optional=True)
    cell_mem_init_tensor: TensorDesc | None = input_field(optional=True)
    sequence_lengths_tensor: TensorDesc | None = input_field(optional=True)
    peephole_tensor: TensorDesc | None = input_field(optional=True)
    output_sequence_tensor: TensorDesc | None = output_field(optional=True)
    output_single_tensor: TensorDesc | None = output_field(optional=True)
    output_cell_single_tensor: TensorDesc | None = output_field(optional=True)
    activation_descs: tuple = attribute(OPERATOR_DESC_ARRAY)
    direction: Direction = attribute(enum_type(Direction), default=Direction.FORWARD)
    clip_threshold: float = attribute(FLOAT, default=0.0)
    use_clip_threshold: bool = attribute(BOOL, default=False)
    couple_input_forget: bool = attribute(BOOL, default=False)
    activation_desc_count: int | None = count_of("activation_descs")


@dataclass(frozen=True)
class GruOperatorDesc(OperatorDesc):
    """DML_GRU_OPERATOR_DESC: a one-layer gated recurrent unit, forward, backward or both,
    optionally applying the hidden gate's recurrence before the reset gate (FL 1_0).

    Fields:
        input_tensor: {1, seq_length, batch_size, input_size}.
        weight_tensor: {1, num_directions, 3 * hidden_size, input_size}, gates z, r, h.
        recurrence_tensor: {1, num_directions, 3 * hidden_size, hidden_size}.
        bias_tensor: optional {1, 1, num_directions, 6 * hidden_size} (Wb[zrh], Rb[zrh]).
        hidden_init_tensor: optional {1, num_directions, batch_size, hidden_size}; 0 if null.
        sequence_lengths_tensor: optional UINT32 {1, 1, 1, batch_size}.
        output_sequence_tensor: optional {seq_length, num_directions, batch_size, hidden_size}.
        output_single_tensor: optional {1, num_directions, batch_size, hidden_size}; at least
            one output.
        activation_descs: f, g per direction.
        direction: ``RecurrentNetworkDirection`` (default FORWARD).
        linear_before_reset: TRUE computes ``r * (H Rh^T + Rbh)`` instead of ``(r * H) Rh^T +
            Rbh`` (default FALSE).
        activation_desc_count: optional; the length of ``activation_descs``.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_GRU"
    input_tensor: TensorDesc = input_field()
    weight_tensor: TensorDesc = input_field()
    recurrence_tensor: TensorDesc = input_field()
    bias_tensor: TensorDesc | None = input_field(optional=True)
    hidden_init_tensor: TensorDesc | None = input_field(optional=True)
    sequence_lengths_tensor: TensorDesc | None = input_field(optional=True)
    output_sequence_tensor: TensorDesc | None = output_field(optional=True)
    output_single_tensor: TensorDesc | None = output_field(optional=True)
    activation_descs: tuple = attribute(OPERATOR_DESC_ARRAY)
    direction: Direction = attribute(enum_type(Direction), default=Direction.FORWARD)
    linear_before_reset: bool = attribute(BOOL, default=False)
    activation_desc_count: int | None = count_of("activation_descs")


# ---------------------------------------------------------------------------------------------
# Shapes, inference and rules


def backward_flags(d: Any) -> tuple[bool, ...]:
    """Per direction (the tensors' num_directions axis): whether it walks the sequence
    backward."""
    return {
        Direction.FORWARD: (False,),
        Direction.BACKWARD: (True,),
        Direction.BIDIRECTIONAL: (False, True),
    }[d.direction]


class _Dims(NamedTuple):
    seq: int
    batch: int
    input: int
    hidden: int
    directions: int


def _dims(d: Any) -> _Dims:
    _, seq, batch, inputs = d.input_tensor.sizes
    return _Dims(seq, batch, inputs, d.recurrence_tensor.sizes[3], len(backward_flags(d)))


def _output_sizes(d: Any) -> dict[str, tuple[int, ...]]:
    n = _dims(d)
    single = (1, n.directions, n.batch, n.hidden)
    return {
        "output_sequence_tensor": (n.seq, n.directions, n.batch, n.hidden),
        "output_single_tensor": single,
        "output_cell_single_tensor": single,
    }


def infer_recurrent(d: Any) -> tuple[TensorDesc, ...]:
    sizes = _output_sizes(d)
    return tuple(
        TensorDesc(d.input_tensor.data_type, sizes[f.name])
        for f in d.declared(OUTPUT)
        if getattr(d, f.name) is not None
    )


def _expected_sizes(fam: _Family, d: Any) -> dict[str, tuple]:
    """Per tensor field: each dimension as (size, what it is) for the messages."""
    n = _dims(d)
    g = fam.gates
    one = (1, "")
    dirs = (n.directions, f"num_directions of {d.direction.name}")
    gates = (g * n.hidden, "hidden_size" if g == 1 else f"{g} * hidden_size")
    hidden = (n.hidden, "hidden_size (RecurrenceTensor.Sizes[3])")
    batch = (n.batch, "batch_size (InputTensor.Sizes[2])")
    state = (one, dirs, batch, hidden)
    return {
        "input_tensor": (one,),
        "recurrence_tensor": (one, dirs, gates),
        "weight_tensor": (one, dirs, gates, (n.input, "input_size (InputTensor.Sizes[3])")),
        "bias_tensor": (one, one, dirs, (2 * g * n.hidden, f"{2 * g} * hidden_size")),
        "hidden_init_tensor": state,
        "cell_mem_init_tensor": state,
        "sequence_lengths_tensor": (one, one, one, batch),
        "peephole_tensor": (one, one, dirs, (3 * n.hidden, "3 * hidden_size")),
        "output_sequence_tensor": (
            (n.seq, "seq_length (InputTensor.Sizes[1])"),
            dirs,
            batch,
            hidden,
        ),
        "output_single_tensor": state,
        "output_cell_single_tensor": state,
    }


def _gate_desc(d: Any) -> TensorDesc:
    """The tensor an activation sees, for its own rules and support table: one direction's
    {1, 1, batch_size, hidden_size} gate values in the operator's data type."""
    n = _dims(d)
    return TensorDesc(d.input_tensor.data_type, (1, 1, n.batch, n.hidden))


def _validate_activations(fam: _Family, d: Any, v: Validator) -> None:
    allowed = ("an element-wise activation", element_wise_activations())
    for i, act in enumerate(d.activation_descs):  # what each is, before how many there are
        check_kind(v, f"ActivationDescs[{i}]", act, allowed)
    n_dirs = len(backward_flags(d))
    per = len(fam.functions)
    want = per * n_dirs
    v.check(
        "ActivationDescs",
        len(d.activation_descs) == want,
        f"must hold {want} activations ({', '.join(fam.functions)} for each of the "
        f"{n_dirs} direction(s) of {d.direction.name}), got {len(d.activation_descs)}",
    )
    gate = _gate_desc(d)
    # The activation's own table at the target level; other data types are the owner's table's
    # to reject (it runs after these rules).
    level = v.level if gate.data_type in F2 else None
    for i, act in enumerate(d.activation_descs):
        validate_nested(v, f"ActivationDescs[{i}]", act, gate, None, level)


def validate_recurrent(fam: _Family, d: Any, v: Validator) -> None:
    tensors = d.input_slots() + d.output_slots()
    for path, t in tensors:
        v.check(f"{path}.DimensionCount", t.rank == 4, f"must be 4, got {t.rank}")
    floats = [(p, t) for p, t in tensors[1:] if p != "SequenceLengthsTensor"]
    v.same("data_type", floats, ("InputTensor", d.input_tensor))
    if d.sequence_lengths_tensor is not None:
        got = d.sequence_lengths_tensor.data_type
        v.check(
            "SequenceLengthsTensor.DataType",
            got is DataType.UINT32,
            f"must be UINT32, got {got.name}",
        )
    for path, t in d.input_slots():
        v.check(
            f"{path}.Flags",
            t.flags is TensorFlags.NONE,
            f"must be NONE: {d.operator_type} does not support OWNED_BY_DML",
        )
    outputs = [dml_member_name(f.name) for f in d.declared(OUTPUT)]
    v.check(
        "",
        bool(d.output_slots()),
        f"needs at least one output tensor; {', '.join(outputs)} are all null",
    )
    expected = _expected_sizes(fam, d)
    for f in d.declared(INPUT) + d.declared(OUTPUT):
        t = getattr(d, f.name)
        if t is None:
            continue
        path = dml_member_name(f.name)
        for i, (size, what) in enumerate(expected[f.name]):
            if t.sizes[i] != size:
                label = f"{what} = {size}" if what else str(size)
                v.fail(f"{path}.Sizes[{i}]", f"must equal {label}, got {t.sizes[i]}")
    _validate_activations(fam, d, v)


def validate_rnn(d: RnnOperatorDesc, v: Validator) -> None:
    validate_recurrent(_RNN, d, v)


def validate_gru(d: GruOperatorDesc, v: Validator) -> None:
    validate_recurrent(_GRU, d, v)


def validate_lstm(d: LstmOperatorDesc, v: Validator) -> None:
    validate_recurrent(_LSTM, d, v)
    # DirectML's page does not say; a negative threshold would make an empty range.
    v.check(
        "ClipThreshold",
        not d.use_clip_threshold or d.clip_threshold >= 0,
        f"must be >= 0 when UseClipThreshold is TRUE, got {d.clip_threshold}",
    )


# ---------------------------------------------------------------------------------------------
# Lowering


def _apply(act: OperatorDesc, y):
    """One activation desc's own lowering on ``y`` (in the compute type: no rounding)."""
    desc = filled(act, TensorDesc(DataType.from_dtype(y.dtype), y.shape))
    (out,) = lookup(act.operator_type).lower(desc, y)
    return out


def _activate(acts: tuple, y):
    """``y`` {D, batch, hidden} through each direction's activation."""
    if all(a == acts[0] for a in acts):
        return _apply(acts[0], y)
    return jnp.stack([_apply(a, y[i]) for i, a in enumerate(acts)])


class _Recurrence(NamedTuple):
    """RecurrenceTensor {D, G * hidden, hidden} of one layer as the loop reads it."""

    weights: Any  # in the layer's type
    wide: Any  # float32: FLOAT16's derivatives flow here, summed over the steps in float32

    def rows(self, start: int, stop: int) -> _Recurrence:
        return _Recurrence(self.weights[:, start:stop], self.wide[:, start:stop])


def _matmul(h, r: _Recurrence):
    """``h`` {D, batch, k} (float32) x ``r`` {D, n, k}^T per direction -> {D, batch, n} in
    float32.

    FLOAT16 weights meet the float32 state in ``pieces_product``, which needs |values| < 1: each
    row of ``h`` (one direction's batch entry) is multiplied by the power of two ``2**-e`` with
    ``max |row| < 2**e`` and the product by ``2**e`` (both exact), so a value v of a row whose
    largest magnitude is m enters exactly when ``|v| >= 2**-14 * m`` and within ``2**-38 * m``
    below. The pieces are joined along the batch axis: one product reads R once per step.
    """

    def product(a, b):
        return jnp.einsum(
            "dbk,dnk->dbn", a, b, precision=matmul_precision(), preferred_element_type=jnp.float32
        )

    if r.weights.dtype != jnp.float16:
        return product(h, r.weights)
    # The exponent field of max |row|: biased exponent b gives 2**-e = 2**(126 - b). Capped at
    # 252 so that both powers stay normal float32 numbers (|h * 2**-e| < 4 above the cap, which
    # the pieces still hold); a zero or subnormal maximum (b = 0) gives 2**126.
    top = lax.stop_gradient(jnp.max(jnp.abs(h), axis=-1, keepdims=True))
    b = jnp.minimum((lax.bitcast_convert_type(top, jnp.uint32) >> 23) & 0xFF, np.uint32(252))
    scale = lax.bitcast_convert_type((np.uint32(253) - b) << 23, jnp.float32)
    unscale = lax.bitcast_convert_type((b + 1) << 23, jnp.float32)
    return pieces_product(product, h * scale, r.weights, axis=1, wide=r.wide) * unscale


def state_product(h, r):
    """``h`` {D, batch, hidden} (float32) times R {D, G * hidden, hidden}^T per direction, in
    float32, as a step of the lowering takes it (``_matmul``: FLOAT16 R meets the state as
    float16 pieces of its rows, scaled): for a fast path that takes the first step's product
    of a HiddenInit of any magnitude here."""
    return _matmul(h, _Recurrence(r, wide(r)))


def _split(x, parts: int):
    return jnp.split(x, parts, axis=-1)


def _rnn_cell(d, acts, xw, h, c, r, rb, peephole):
    (f,) = acts
    return _activate(f, xw + _matmul(h, r) + rb), None


def _lstm_cell(d, acts, xw, h, c, r, rb, peephole):
    f_act, g_act, h_act = acts
    with np.errstate(over="ignore"):  # a threshold beyond float32's range clips nothing
        bound = float(np.float32(d.clip_threshold)) if d.use_clip_threshold else None

    def clip(y):
        return y if bound is None else jnp.clip(y, -bound, bound)

    gi, go, gf, gc = _split(xw + _matmul(h, r) + rb, 4)
    if peephole is not None:
        p_i, p_o, p_f = peephole
        gi, gf = gi + p_i * c, gf + p_f * c
    i = _activate(f_act, clip(gi))
    forget = 1 - i if d.couple_input_forget else _activate(f_act, clip(gf))
    cell = forget * c + i * _activate(g_act, clip(gc))
    if peephole is not None:
        go = go + p_o * cell
    o = _activate(f_act, clip(go))
    return o * _activate(h_act, cell), cell


def _gru_cell(d, acts, xw, h, c, r, rb, peephole):
    f_act, g_act = acts
    hidden = h.shape[-1]
    xz, xr, xh = _split(xw, 3)
    if d.linear_before_reset:  # every gate's R H in one product
        hz, hr, hh = _split(_matmul(h, r) + rb, 3)
    else:
        hz, hr = _split(_matmul(h, r.rows(0, 2 * hidden)) + rb[..., : 2 * hidden], 2)
    z = _activate(f_act, xz + hz)
    reset = _activate(f_act, xr + hr)
    if d.linear_before_reset:
        candidate = xh + reset * hh
    else:
        candidate = xh + _matmul(reset * h, r.rows(2 * hidden, 3 * hidden)) + rb[..., 2 * hidden :]
    candidate = _activate(g_act, candidate)
    return (1 - z) * candidate + z * h, None


def _in_step_order(a, lengths):
    """``a`` {seq_length, batch, ...} with each batch entry's first ``length`` steps reversed
    (the steps beyond stay): the order a BACKWARD direction reads them in. Its own inverse."""
    if lengths is None:
        return jnp.flip(a, 0)
    k = jnp.arange(a.shape[0])[:, None]
    index = jnp.where(k < lengths[None, :], lengths[None, :] - 1 - k, k)
    index = index.reshape(index.shape + (1,) * (a.ndim - 2))
    return jnp.take_along_axis(a, index, axis=0)


def lower_recurrent(fam: _Family, d: Any, *arrays):
    present = [f.name for f in d.declared(INPUT) if getattr(d, f.name) is not None]
    given = dict(zip(present, arrays))
    out_type = d.input_tensor.dtype
    x = given["input_tensor"][0]  # {seq, batch, input}
    w = given["weight_tensor"][0]  # {D, G * hidden, input}
    r = given["recurrence_tensor"][0]  # {D, G * hidden, hidden}
    r = _Recurrence(r, wide(r))
    n = _dims(d)
    backward = backward_flags(d)
    width = fam.gates * n.hidden
    state = (n.directions, n.batch, n.hidden)
    compute = jnp.float32 if out_type == jnp.float16 else out_type

    # X W^T (+ Wb) for every step of every direction in one product: {D, seq, batch, G * hidden}.
    # FLOAT16 X and W stay float16: their products are exact in float32, where they accumulate.
    xw = jnp.einsum(
        "tbi,dgi->dtbg", x, w, precision=matmul_precision(), preferred_element_type=compute
    )
    rb = jnp.zeros((n.directions, 1, width), compute)
    if "bias_tensor" in given:
        bias = wide(given["bias_tensor"]).reshape(n.directions, 2, width)
        xw = xw + bias[:, 0][:, None, None, :]
        rb = bias[:, 1][:, None, :]
    h0 = given.get("hidden_init_tensor")
    h0 = jnp.zeros(state, compute) if h0 is None else wide(h0).reshape(state)
    c0 = None
    if fam is _LSTM:
        c0 = given.get("cell_mem_init_tensor")
        c0 = jnp.zeros(state, compute) if c0 is None else wide(c0).reshape(state)
    peephole = None
    if "peephole_tensor" in given:
        p = wide(given["peephole_tensor"]).reshape(n.directions, 3, 1, n.hidden)
        peephole = (p[:, 0], p[:, 1], p[:, 2])
    lengths = valid = None
    if "sequence_lengths_tensor" in given:
        seq = given["sequence_lengths_tensor"].reshape(n.batch)
        lengths = jnp.minimum(seq, np.uint32(n.seq)).astype(jnp.int32)
        valid = jnp.arange(n.seq)[:, None] < lengths[None, :]  # {seq, batch}

    xw = jnp.stack(
        [_in_step_order(xw[i], lengths) if back else xw[i] for i, back in enumerate(backward)],
        axis=1,
    )  # {seq, D, batch, G * hidden}: step k of every direction at index k
    acts = tuple(
        tuple(d.activation_descs[i * len(fam.functions) + j] for i in range(n.directions))
        for j in range(len(fam.functions))
    )  # per function, one activation per direction
    want_sequence = d.output_sequence_tensor is not None

    def step(carry, inputs):
        h, c = carry
        xw_k, valid_k = inputs
        h_new, c_new = fam.cell(d, acts, xw_k, h, c, r, rb, peephole)
        if valid_k is not None:  # steps beyond a sequence's length leave its state as it is
            keep = valid_k[None, :, None]
            h_new = jnp.where(keep, h_new, h)
            c_new = None if c is None else jnp.where(keep, c_new, c)
            out = jnp.where(keep, h_new, jnp.zeros_like(h_new)) if want_sequence else None
        else:
            out = h_new if want_sequence else None
        return (h_new, c_new), out

    (h_last, c_last), ys = lax.scan(step, (h0, c0), (xw, valid), unroll=_UNROLL)
    results = {}
    if want_sequence:
        ys = jnp.stack(
            [
                _in_step_order(ys[:, i], lengths) if back else ys[:, i]
                for i, back in enumerate(backward)
            ],
            axis=1,
        )  # {seq, D, batch, hidden} in time order
        results["output_sequence_tensor"] = ys
    results["output_single_tensor"] = h_last[None]
    results["output_cell_single_tensor"] = None if c_last is None else c_last[None]
    return tuple(
        results[f.name].astype(out_type)
        for f in d.declared(OUTPUT)
        if getattr(d, f.name) is not None
    )


_RNN = _Family(1, ("f",), _rnn_cell)
_LSTM = _Family(4, ("f", "g", "h"), _lstm_cell)
_GRU = _Family(3, ("f", "g"), _gru_cell)


def lower_rnn(d: RnnOperatorDesc, *arrays):
    return lower_recurrent(_RNN, d, *arrays)


def lower_lstm(d: LstmOperatorDesc, *arrays):
    return lower_recurrent(_LSTM, d, *arrays)


def lower_gru(d: GruOperatorDesc, *arrays):
    return lower_recurrent(_GRU, d, *arrays)


# ---------------------------------------------------------------------------------------------
# Registration and examples


def _t(sizes: list[int], data_type: str = "FLOAT32") -> dict:
    return {"DataType": data_type, "Sizes": sizes}


def _acts(*names: str) -> list[dict]:
    return [{"Type": f"ACTIVATION_{n}"} for n in names]


register(
    RnnOperatorDesc,
    infer=infer_recurrent,
    validate=validate_rnn,
    lower=lower_rnn,
    support=_SUPPORT,
    differentiable=lambda d: True,  # the float tensors; sequence lengths are integers
    example=Example(
        {
            "type": "DML_OPERATOR_RNN",
            "desc": {
                "InputTensor": _t([1, 2, 1, 2]),
                "WeightTensor": _t([1, 1, 2, 2]),
                "RecurrenceTensor": _t([1, 1, 2, 2]),
                "BiasTensor": _t([1, 1, 1, 4]),
                "OutputSequenceTensor": _t([2, 1, 1, 2]),
                "OutputSingleTensor": _t([1, 1, 1, 2]),
                "ActivationDescCount": 1,
                "ActivationDescs": _acts("TANH"),
                "Direction": "DML_RECURRENT_NETWORK_DIRECTION_FORWARD",
            },
        },
        {
            "InputTensor": [1, 2, 3, -1],
            "WeightTensor": [0.5, -0.5, 0.25, 1],
            "RecurrenceTensor": [0.5, 0, 0, 0.5],
            "BiasTensor": [0.1, 0.2, 0, -0.1],
        },
        "two steps of tanh(X W^T + H R^T + Wb + Rb), every step and the last",
    ),
)

register(
    LstmOperatorDesc,
    infer=infer_recurrent,
    validate=validate_lstm,
    lower=lower_lstm,
    support=_SUPPORT,
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_LSTM",
            "desc": {
                "InputTensor": _t([1, 2, 1, 1]),
                "WeightTensor": _t([1, 1, 4, 1]),
                "RecurrenceTensor": _t([1, 1, 4, 1]),
                "PeepholeTensor": _t([1, 1, 1, 3]),
                "OutputSequenceTensor": _t([2, 1, 1, 1]),
                "OutputSingleTensor": _t([1, 1, 1, 1]),
                "OutputCellSingleTensor": _t([1, 1, 1, 1]),
                "ActivationDescCount": 3,
                "ActivationDescs": _acts("SIGMOID", "TANH", "TANH"),
                "Direction": "DML_RECURRENT_NETWORK_DIRECTION_FORWARD",
                "ClipThreshold": 0.0,
                "UseClipThreshold": False,
                "CoupleInputForget": False,
            },
        },
        {
            "InputTensor": [1, 2],
            "WeightTensor": [0.5, 0.25, -0.5, 1],
            "RecurrenceTensor": [0.1, 0.2, 0.3, 0.4],
            "PeepholeTensor": [0.1, 0.2, 0.3],
        },
        "two LSTM steps (gates i, o, f, c) with peepholes: hidden states and the last cell",
    ),
)

register(
    GruOperatorDesc,
    infer=infer_recurrent,
    validate=validate_gru,
    lower=lower_gru,
    support=_SUPPORT,
    differentiable=lambda d: True,
    example=Example(
        {
            "type": "DML_OPERATOR_GRU",
            "desc": {
                "InputTensor": _t([1, 3, 2, 1]),
                "WeightTensor": _t([1, 2, 3, 1]),
                "RecurrenceTensor": _t([1, 2, 3, 1]),
                "SequenceLengthsTensor": _t([1, 1, 1, 2], "UINT32"),
                "OutputSequenceTensor": _t([3, 2, 2, 1]),
                "OutputSingleTensor": _t([1, 2, 2, 1]),
                "ActivationDescCount": 4,
                "ActivationDescs": _acts("SIGMOID", "TANH", "SIGMOID", "TANH"),
                "Direction": "DML_RECURRENT_NETWORK_DIRECTION_BIDIRECTIONAL",
                "LinearBeforeReset": True,
            },
        },
        {
            "InputTensor": [1, -1, 2, 0.5, 3, 7],
            "WeightTensor": [0.5, -0.25, 1, -0.5, 0.25, 0.75],
            "RecurrenceTensor": [0.1, 0.2, 0.3, 0.3, -0.2, 0.1],
            "SequenceLengthsTensor": [3, 2],
        },
        "a bidirectional GRU over sequences of lengths 3 and 2 (batch entry 1 ends early)",
    ),
)
