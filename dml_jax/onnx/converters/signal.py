"""Signal processing: DFT, STFT and MelWeightMatrix, which DirectML has no operator for (ONNX
Runtime's DirectML provider runs DFT and STFT as compute shaders of its own, outside DirectML's
operator set), as direct JAX lowerings with ONNX's semantics.

A complex tensor is ONNX's real representation: a last dimension of 2 (real, imaginary), or of 1
for a real signal. DFT and STFT compute in complex64 (complex128 for double tensors; float16 is
widened to float32 and the result rounded once). Their output shapes come from dft_length, axis,
frame_step and frame_length, which must be known at import (``ctx.const``: the session
specialises on graph inputs that give them). The window ops (HannWindow, HammingWindow,
BlackmanWindow) run as their ONNX function bodies.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ...enums import DataType
from .. import fold
from . import converter
from ._common import axis_of

_FLOATS = (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64)


def _scalar(ctx, v, what: str) -> int | None:
    """An integer scalar input known at import (None when absent)."""
    if v is None:
        return None
    a = np.asarray(ctx.const(v, what)).reshape(-1)
    if a.size != 1:
        raise ctx.fail(f"input '{what}' must be a scalar, got {a.size} values")
    return int(a[0])


def _signal_type(ctx, x, what: str) -> DataType:
    if x.data_type not in _FLOATS:
        raise ctx.fail(f"input '{what}' must be a float tensor, got {x.data_type.name}")
    if x.rank < 2 or x.shape[-1] not in (1, 2):
        raise ctx.fail(
            f"input '{what}' must end in a dimension of 1 (real) or 2 (complex), got shape "
            f"{list(x.shape)}"
        )
    return x.data_type


# Transforms up to this many matrix entries (input length x output length) are products with
# twiddle factors computed at import; larger ones run as FFTs.
MATRIX_LIMIT = 1 << 20


def _twiddles(rows: int, cols: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi r c / length for r < rows, c < cols, in float64 from the exact
    residue r c mod length, the quarter turns exact (so terms that cancel in exact arithmetic,
    as the imaginary parts of real signals' symmetric frequencies, cancel here too)."""
    m = np.outer(np.arange(rows, dtype=np.int64), np.arange(cols, dtype=np.int64)) % length
    angle = 2 * np.pi * m / length
    c, s = np.cos(angle), np.sin(angle)
    quarter = (4 * m) % length == 0
    q = (4 * m) // length
    c = np.where(quarter, np.choose(q % 4, [1.0, 0.0, -1.0, 0.0]), c)
    s = np.where(quarter, np.choose(q % 4, [0.0, 1.0, 0.0, -1.0]), s)
    return c, s


def _matmul(a, m: np.ndarray, compute):
    return jnp.matmul(a, jnp.asarray(m, compute), precision="highest")


def _fourier(re, im, length: int, outputs: int, *, inverse: bool, compute):
    """The DFT (``inverse``: its inverse, divided by ``length``) of ``re + i im`` along the last
    axis, read as a signal of ``length`` elements (truncated, or zero-padded), at the first
    ``outputs`` frequencies (or samples). ``im`` may be None (a real signal). Returns
    ``(re, im)`` arrays of ``outputs`` elements along the last axis."""
    n = min(re.shape[-1], length)
    re = re[..., :n]
    im = None if im is None else im[..., :n]
    if n * outputs > MATRIX_LIMIT:
        c = re if im is None else re + 1j * im
        f = jnp.fft.ifft if inverse else jnp.fft.fft
        y = f(c.astype(jnp.result_type(compute, jnp.complex64)), n=length, axis=-1)
        y = y[..., :outputs]
        return jnp.real(y), jnp.imag(y)
    cos, sin = _twiddles(n, outputs, length)
    sign = 1.0 if inverse else -1.0  # e^(sign i theta) = cos + sign i sin
    y_re = _matmul(re, cos, compute)
    y_im = _matmul(re, sign * sin, compute)
    if im is not None:
        y_re = y_re - _matmul(im, sign * sin, compute)
        y_im = y_im + _matmul(im, cos, compute)
    if inverse:
        y_re, y_im = y_re / length, y_im / length
    return y_re, y_im


def _hermitian_inverse(re, im, length: int, compute):
    """The real signal of ``length`` elements whose spectrum's first length // 2 + 1 frequencies
    are ``re + i im`` along the last axis (the rest by conjugate symmetry; the imaginary parts
    of frequency 0 and length / 2 are ignored), as NumPy's irfft."""
    m = length // 2 + 1
    n = min(re.shape[-1], m)
    re, im = re[..., :n], im[..., :n]
    if n * length > MATRIX_LIMIT:
        c = (re + 1j * im).astype(jnp.result_type(compute, jnp.complex64))
        return jnp.fft.irfft(c, n=length, axis=-1)
    cos, sin = _twiddles(n, length, length)
    weight = np.full((n, 1), 2.0)
    weight[0] = 1.0
    if length % 2 == 0 and n == m:
        weight[m - 1] = 1.0  # frequency length / 2 is its own mirror image
    return (_matmul(re, weight * cos, compute) - _matmul(im, weight * sin, compute)) / length


def _parts(a, compute):
    """ONNX's real representation (last dimension 1 or 2) as real and imaginary parts (None for
    a real signal)."""
    a = a.astype(compute)
    return a[..., 0], (a[..., 1] if a.shape[-1] == 2 else None)


def _compute(t: DataType):
    return np.float64 if t is DataType.FLOAT64 else np.float32


@converter("DFT", kind="jax")
def _dft(ctx, node, inputs):
    """DFT-17 (axis an attribute, default 1) and DFT-20 (axis an input, default -2): along
    ``axis``, the signal truncated or zero-padded to dft_length. onesided with the forward
    transform keeps the first dft_length // 2 + 1 frequencies (RFFT); with the inverse it reads
    them as a Hermitian spectrum and writes the real signal of dft_length elements (IRFFT,
    default dft_length 2 * (n - 1)). The inverse divides by dft_length. A complex input to RFFT,
    or a real one to the inverse, is computed as ONNX's reference does (the full transform
    sliced; an imaginary part of 0).

    Transforms of up to ``MATRIX_LIMIT`` matrix entries are products with twiddle factors
    computed in float64 at import (so outputs that cancel exactly, as ONNX's float64 reference
    finds them, come out near 0 rather than a float32 FFT's rounding, ~1e-6 of the signal's
    scale); larger ones run as FFTs."""
    x, length_in = inputs[0], inputs[1] if len(inputs) > 1 else None
    t = _signal_type(ctx, x, "input")
    r = x.rank
    if ctx.opset >= 20:
        axis = _scalar(ctx, inputs[2] if len(inputs) > 2 else None, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(ctx.attr("axis", 1))
    if not (-r <= axis <= -2 or 0 <= axis <= r - 2):
        raise ctx.fail(
            f"{'input' if ctx.opset >= 20 else 'attribute'} 'axis': {axis} is out of range for "
            f"rank {r} ([-{r}, -2] or [0, {r - 2}]: the last dimension holds the real and "
            "imaginary parts)"
        )
    axis = axis_of(ctx, axis, r)
    inverse = bool(int(ctx.attr("inverse", 0)))
    onesided = bool(int(ctx.attr("onesided", 0)))
    n = x.shape[axis]
    length = _scalar(ctx, length_in, "dft_length")
    if length is None:
        length = 2 * (n - 1) if inverse and onesided else n
    if length < 1:
        raise ctx.fail(f"input 'dft_length' must be >= 1, got {length}")
    shape = list(x.shape)
    shape[axis] = length // 2 + 1 if onesided and not inverse else length
    shape[-1] = 1 if inverse and onesided else 2
    compute = _compute(t)
    outputs = shape[axis]

    def dft(a):
        re, im = _parts(jnp.moveaxis(a, axis, -2), compute)  # the signal axis last
        if inverse and onesided:
            im = jnp.zeros_like(re) if im is None else im
            y = _hermitian_inverse(re, im, length, compute)[..., None]
        else:
            y = jnp.stack(_fourier(re, im, length, outputs, inverse=inverse, compute=compute), -1)
        return (jnp.moveaxis(y, -2, axis),)

    return ctx.jax("DFT", dft, [x], [(shape, t)])


@converter("STFT", kind="jax")
def _stft(ctx, node, inputs):
    """STFT-17: frames of frame_length elements every frame_step elements of the signal's axis
    1, frames = (signal_length - frame_length) // frame_step + 1, each multiplied by the window
    (all ones when absent) and transformed as DFT does, onesided (the default) keeping
    frame_length // 2 + 1 frequencies. frame_length defaults to the window's length, else the
    signal's."""
    signal, step_in = inputs[:2]
    window, length_in = (list(inputs[2:]) + [None, None])[:2]
    t = _signal_type(ctx, signal, "signal")
    if signal.rank != 3:
        raise ctx.fail(f"input 'signal' must have rank 3, got shape {list(signal.shape)}")
    batch, samples = signal.shape[:2]
    step = _scalar(ctx, step_in, "frame_step")
    length = _scalar(ctx, length_in, "frame_length")
    if window is not None:
        if window.rank != 1:
            raise ctx.fail(f"input 'window' must be 1-D, got shape {list(window.shape)}")
        if length is not None and length != window.shape[0]:
            raise ctx.fail(
                f"input 'frame_length' ({length}) differs from the window's length "
                f"{window.shape[0]}"
            )
        if window.data_type != t:
            raise ctx.fail(f"input 'window' has type {window.data_type.name}, the signal {t.name}")
        length = window.shape[0]
    elif length is None:
        length = samples
    if step < 1:
        raise ctx.fail(f"input 'frame_step' must be >= 1, got {step}")
    if not 1 <= length <= samples:
        raise ctx.fail(
            f"input 'frame_length' ({length}) must be in [1, {samples}] (the signal's length)"
        )
    frames = (samples - length) // step + 1
    onesided = bool(int(ctx.attr("onesided", 1)))
    bins = length // 2 + 1 if onesided else length
    index = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    compute = _compute(t)

    def stft(a, w=None):
        re, im = _parts(a, compute)
        re = jnp.take(re, jnp.asarray(index), axis=1)  # batch, frames, length
        im = None if im is None else jnp.take(im, jnp.asarray(index), axis=1)
        if w is not None:
            w = w.astype(compute)
            re, im = re * w, (None if im is None else im * w)
        y = _fourier(re, im, length, bins, inverse=False, compute=compute)
        return (jnp.stack(y, -1),)

    present = [signal] if window is None else [signal, window]
    return ctx.jax("STFT", stft, present, [((batch, frames, bins, 2), t)])


@converter("MelWeightMatrix", kind="jax")
def _mel_weight_matrix(ctx, node, inputs):
    """A table computed from five scalars: every one is needed at import (``ctx.const``; the
    session specialises on graph inputs that give them), and the table is then ONNX's reference
    evaluated at import, as folding computes it. A node reaches this converter with all of them
    known only when one is a parameter (a floating-point initializer, never folded away)."""
    names = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")
    for v, name in zip(inputs, names):
        ctx.const(v, name)
    return fold.evaluate(node, "", ctx.opset, inputs, ctx.where)
