"""NumPy references of GEMM and CONVOLUTION, from DML_GEMM_OPERATOR_DESC,
DML_CONVOLUTION_OPERATOR_DESC, DML_MATRIX_TRANSFORM, DML_CONVOLUTION_MODE and
DML_CONVOLUTION_DIRECTION (learn.microsoft.com, paraphrased below).

Both operators compute in float64 from the inputs as given and round once to the output tensor's
type; a fused activation is then applied to that rounded result (``activation``'s convention, as
ADD1 does). FLOAT members (GEMM's Alpha and Beta) are float32 in DirectML: each is read as
np.float64(np.float32(value)). Enum fields may be enum members (``.name``) or plain suffix strings
(stand-in descs in self-checks).

GEMM (DML_GEMM_OPERATOR_DESC)
-----------------------------
Output = FusedActivation(Alpha * TransA(A) x TransB(B) + Beta * C): ``x`` a matrix product,
``*`` a scalar product. The tensors are { BatchCount, ChannelCount, rows, columns }; the page's
feature level 1_0 table allows only 4 dimensions, its 4_0 table 2 to 4 with BatchCount and
ChannelCount optional. BatchCount * ChannelCount independent products are taken over the last two
dimensions: A is { .., M, K } (NONE) or { .., K, M } (TRANSPOSE: the last two dimensions swapped),
B is { .., K, N } or { .., N, K }, C and the output { .., M, N }. The page lists the leading
dimensions of A, B, C and the output with the same names; it says nothing about a size 1 of A or
B broadcasting (DirectML broadcasts through strides, so the caller's tensors already have the
output's leading sizes). Here the product uses NumPy's broadcasting of the leading dimensions and
the result is broadcast to the output's sizes, which is the same thing for equal sizes; whether
unequal sizes are valid is the validation's business. C is optional: absent, it counts as 0 and
Beta is ignored (the page says so). C must have the output's Sizes (tensor constraints), so the
``c`` array here has the output's shape. The formula is evaluated literally: Beta = 0 with an
infinite or NaN C gives NaN, as 0 * inf does (the page is silent on it).

CONVOLUTION (DML_CONVOLUTION_OPERATOR_DESC)
-------------------------------------------
Input { N, C_in, [D], [H], W }, Filter { FilterBatchCount, FilterChannelCount, [D], [H], W },
optional Bias { 1, C_out, 1, .. }, Output { N, C_out, [D], [H], W }; the spatial dimensions are
the filter's lower ones and DimensionCount (the length of Strides, Dilations, StartPadding,
EndPadding, OutputPadding) is 2 for 4-D tensors and 3 for 5-D ones (feature level 4_0 adds 3-D
tensors: one spatial dimension). Here the spatial count is ``x.ndim - 2``.

- Mode / orientation (the page's "Mode interactions" table and DML_CONVOLUTION_MODE):
  CROSS_CORRELATION with FORWARD uses the filter as it is; CONVOLUTION with FORWARD flips each
  kernel along every spatial dimension. With BACKWARD the page's table inverts the two:
  CROSS_CORRELATION + BACKWARD "transposes" (flips) the filter, CONVOLUTION + BACKWARD uses it as
  it is. The table describes the backward pass as a sliding window over the zero-upsampled
  input; a window with the flipped filter is the same sum as scattering each input element with
  the filter as stored. So BACKWARD is exactly the transpose (adjoint) of FORWARD of the same
  mode, filter, strides, dilations and padding: with ``w`` the filter as stored for
  CROSS_CORRELATION and flipped for CONVOLUTION, in both directions,
      FORWARD:  out[n, co, o] = sum over ci in co's group, k of x[n, ci, o*S + k*Dil - Start]
                                * w[co, ci - group start, k]          (outside the input: 0)
      BACKWARD: out[n, co, i*S + k*Dil - Start] += x[n, ci, i] * w[ci, co - group start, k]
                for every input position i and tap k whose target lies inside the output.
  (ONNX Runtime's DirectML provider maps ONNX ConvTranspose to CROSS_CORRELATION + BACKWARD with
  ONNX's filter unchanged, which is this scatter; its Conv to CROSS_CORRELATION + FORWARD.)
- Filter layout: FORWARD { C_out, C_in / GroupCount, k.. } (FilterBatchCount is the output
  channel count). BACKWARD is FORWARD's transpose with the same filter tensor, so its filter is
  { C_in, C_out / GroupCount, k.. }: FilterBatchCount is the backward op's input channel count
  (the forward op's output channels) and C_out = GroupCount * FilterChannelCount. The page names
  the dimensions only FilterBatchCount / FilterChannelCount; this layout is the transpose rule's
  consequence and ONNX ConvTranspose's, which DirectML's ONNX provider passes through unchanged.
- Groups: the input channels are split into GroupCount consecutive groups and so are the output
  channels; group g's outputs see only group g's inputs. GroupCount = C_in with FORWARD is the
  depth-wise convolution the page describes.
- Padding: StartPadding / EndPadding are zeros added before / after each spatial dimension of
  the input (FORWARD); for BACKWARD they are interpreted as the transpose's (they crop the start
  / end of the full scatter result). Output sizes (DirectMLX's Convolution helper computes the
  forward one; the backward one is its transpose's):
      FORWARD:  out = 1 + (in + Start + End - ((k - 1) * Dil + 1)) // S
      BACKWARD: out = (in - 1) * S + (k - 1) * Dil + 1 - Start - End + OutputPadding
  The reference takes the sizes from OutputTensor and does not check them.
- OutputPadding: "a zero padding applied to the end of each spatial dimension of the result".
  Here the output simply has OutputPadding more positions at the end and every position gets the
  scatter's sum; where EndPadding is 0 no tap lands in that tail, so it is 0 (plus bias), the
  page's words. Where EndPadding > 0 some taps cropped by EndPadding land in the tail: they are
  kept (ONNX ConvTranspose's output_padding, and what ONNX Runtime's DirectML provider relies on:
  it gives DirectML the ONNX output sizes and zeroes OutputPadding). The worked values use
  EndPadding = 0 wherever OutputPadding > 0, where both readings agree.
- Bias: one value per output channel added to every element of that channel, after the
  convolution and before the fused activation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .activation import activation


def _f32(value: Any) -> np.float64:
    """A FLOAT member as DirectML holds it (float32), widened."""
    return np.float64(np.float32(value))


def _enum(value: Any, default: str) -> str:
    if value is None:
        return default
    return value if isinstance(value, str) else value.name


def _round(desc: Any, y: np.ndarray) -> np.ndarray:
    return np.asarray(y).astype(desc.output_tensor.dtype)


# ---------------------------------------------------------------------------------------------
# GEMM


def gemm(desc: Any, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None):
    wa, wb = a.astype(np.float64), b.astype(np.float64)
    if _enum(getattr(desc, "trans_a", None), "NONE") == "TRANSPOSE":
        wa = np.swapaxes(wa, -1, -2)
    if _enum(getattr(desc, "trans_b", None), "NONE") == "TRANSPOSE":
        wb = np.swapaxes(wb, -1, -2)
    alpha = _f32(getattr(desc, "alpha", 1.0))
    with np.errstate(invalid="ignore", over="ignore"):
        y = alpha * np.matmul(wa, wb)
        if c is not None:
            y = y + _f32(getattr(desc, "beta", 1.0)) * c.astype(np.float64)
    y = np.broadcast_to(y, tuple(desc.output_tensor.sizes))
    return (activation(getattr(desc, "fused_activation", None), _round(desc, y)),)


# ---------------------------------------------------------------------------------------------
# CONVOLUTION


def _spatial(desc: Any, name: str, nd: int, default: int) -> tuple[int, ...]:
    values = getattr(desc, name, None)
    if values is None:
        return (default,) * nd
    values = tuple(int(v) for v in values)
    assert len(values) == nd, f"{name} has {len(values)} entries for {nd} spatial dimensions"
    return values


def _oriented_filter(desc: Any, w: np.ndarray) -> np.ndarray:
    """The filter as the scatter / gather formulas use it: flipped along every spatial
    dimension in CONVOLUTION mode, as stored in CROSS_CORRELATION mode (either direction)."""
    ww = w.astype(np.float64)
    if _enum(getattr(desc, "mode", None), "CROSS_CORRELATION") == "CONVOLUTION":
        ww = ww[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)]
    return ww


def _forward(x, w, out_shape, strides, dilations, start, groups) -> np.ndarray:
    """Gather: every output position, every kernel tap; channels vectorized per group."""
    nd = x.ndim - 2
    y = np.zeros(out_shape, np.float64)
    cin_g, cout_g = x.shape[1] // groups, w.shape[0] // groups
    assert w.shape[1] == cin_g, f"filter has {w.shape[1]} channels, groups need {cin_g}"
    assert out_shape[1] == w.shape[0]
    for o in np.ndindex(*out_shape[2:]):
        for k in np.ndindex(*w.shape[2:]):
            src = tuple(o[i] * strides[i] + k[i] * dilations[i] - start[i] for i in range(nd))
            if any(not 0 <= src[i] < x.shape[2 + i] for i in range(nd)):
                continue  # a padding position: zero
            xv = x[(slice(None), slice(None)) + src]  # (N, C_in)
            for g in range(groups):
                ci, co = slice(g * cin_g, (g + 1) * cin_g), slice(g * cout_g, (g + 1) * cout_g)
                # (N, cin_g) @ (cin_g, cout_g)
                y[(slice(None), co) + o] += xv[:, ci] @ w[(co, slice(None)) + k].T
    return y


def _backward(x, w, out_shape, strides, dilations, start, groups) -> np.ndarray:
    """Scatter: every input position, every kernel tap; channels vectorized per group."""
    nd = x.ndim - 2
    y = np.zeros(out_shape, np.float64)
    cin_g, cout_g = x.shape[1] // groups, w.shape[1]
    assert w.shape[0] == x.shape[1], "BACKWARD's filter is { C_in, C_out / GroupCount, .. }"
    assert out_shape[1] == groups * cout_g
    for i in np.ndindex(*x.shape[2:]):
        xv = x[(slice(None), slice(None)) + i]  # (N, C_in)
        for k in np.ndindex(*w.shape[2:]):
            dst = tuple(i[t] * strides[t] + k[t] * dilations[t] - start[t] for t in range(nd))
            if any(not 0 <= dst[t] < out_shape[2 + t] for t in range(nd)):
                continue  # cropped by StartPadding / EndPadding
            for g in range(groups):
                ci, co = slice(g * cin_g, (g + 1) * cin_g), slice(g * cout_g, (g + 1) * cout_g)
                # (N, cin_g) @ (cin_g, cout_g)
                y[(slice(None), co) + dst] += xv[:, ci] @ w[(ci, slice(None)) + k]
    return y


def convolution(desc: Any, x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None):
    nd = x.ndim - 2
    strides = _spatial(desc, "strides", nd, 1)
    dilations = _spatial(desc, "dilations", nd, 1)
    start = _spatial(desc, "start_padding", nd, 0)
    groups = int(getattr(desc, "group_count", 1) or 1)
    out_shape = tuple(desc.output_tensor.sizes)
    direction = _enum(getattr(desc, "direction", None), "FORWARD")
    run = _forward if direction == "FORWARD" else _backward
    with np.errstate(invalid="ignore", over="ignore"):
        y = run(
            x.astype(np.float64),
            _oriented_filter(desc, w),
            out_shape,
            strides,
            dilations,
            start,
            groups,
        )
        if bias is not None:
            y = y + bias.astype(np.float64).reshape((1, -1) + (1,) * nd)
    return (activation(getattr(desc, "fused_activation", None), _round(desc, y)),)


REFERENCES = {
    "DML_OPERATOR_GEMM": gemm,
    "DML_OPERATOR_CONVOLUTION": convolution,
}
