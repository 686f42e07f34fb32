"""Buffer mode: DirectML's memory model (strides, broadcasting, padding, in-place binding).

In buffer mode every tensor is bound to a 1-D buffer and read or written through its desc's
Sizes and Strides: the element at index ``(i0, ..., in)`` lives at buffer element
``sum(ik * Strides[k])``. A stride of 0 broadcasts, strides larger than the packed ones pad, and
permuted strides express other layouts (NHWC data behind an NCHW desc).

Everything here is decided statically from the descs (Python ints), so the lowered program uses
the plainest primitive each layout allows:

* a *nested* layout (the dimensions sorted by stride each step at least over the span of the
  smaller-stride ones) reads with slice / pad / reshape / transpose, and writes back by the same
  steps plus concatenate; a packed (possibly permuted) output is one ``dynamic_update_slice``;
* stride-0 (and size-1) dimensions of an input become ``broadcast_in_dim``;
* only an input layout that is not nested (overlapping windows, interleaved strides) falls back
  to a gather, and only an output layout that validation would reject falls back to a scatter.

UINT4 / INT4 buffers hold DirectML's bytes, two elements a byte with element 0 in the low
nibble (``unpack_4bit_buffer``): the program reads them as a buffer of 4-bit elements and packs
the result back, so an output leaves the other nibble of a byte it shares unchanged.

Output layouts must not make two logical elements share a buffer element (DirectML leaves such
writes undefined); ``check_output_layout`` enforces the nested rule below at validation time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .checks import check_x64
from .errors import ValidationError, Validator, show
from .tensor import TensorDesc

__all__ = [
    "Layout",
    "analyse",
    "buffer_function",
    "check_output_layout",
    "overlap_reason",
    "pack_4bit_buffer",
    "read_tensor",
    "run_buffers",
    "unpack_4bit_buffer",
    "write_tensor",
]


class Layout(NamedTuple):
    """The static shape of a desc's memory layout.

    Attributes:
        kept: ``(axis, size, stride)`` of every dimension with size > 1 and stride > 0, the
            largest stride first (outermost in memory first).
        broadcast: ``(axis, size)`` of every dimension with size > 1 and stride 0.
        conflict: ``None`` when ``kept`` is nested; otherwise ``(axis, span)`` for the first
            dimension (in increasing stride order) whose stride is smaller than ``span``, the
            number of elements spanned by the dimensions with smaller strides.
    """

    kept: tuple[tuple[int, int, int], ...]
    broadcast: tuple[tuple[int, int], ...]
    conflict: tuple[int, int] | None

    @property
    def nested(self) -> bool:
        return self.conflict is None

    @property
    def packed(self) -> bool:
        """Nested with no gaps: the kept elements fill ``[0, count)`` (possibly permuted)."""
        step = 1
        for _, n, s in reversed(self.kept):
            if s != step:
                return False
            step *= n
        return True


def analyse(sizes: Sequence[int], strides: Sequence[int]) -> Layout:
    """Classifies a layout. Size-1 dimensions are ignored: only index 0 is ever used there.

    Dimensions with stride > 0 are sorted by stride (ties by size); the layout is *nested* when
    each stride is >= the span ``sum((n - 1) * s) + 1`` of the dimensions sorted before it. A
    nested layout never maps two indices to one element, and it is a box that reshapes
    reach: rows of ``stride`` elements of which the first ``span`` are used.
    """
    kept, broadcast = [], []
    for axis, (n, s) in enumerate(zip(sizes, strides)):
        if n == 1:
            continue
        if s == 0:
            broadcast.append((axis, n))
        else:
            kept.append((axis, n, s))
    kept.sort(key=lambda d: (d[2], d[1]))
    conflict, span = None, 1
    for axis, n, s in kept:
        if s < span and conflict is None:
            conflict = (axis, span)
        span += (n - 1) * s
    return Layout(tuple(reversed(kept)), tuple(broadcast), conflict)


def overlap_reason(t: TensorDesc) -> str | None:
    """Why ``t``'s layout lets two logical elements share a buffer element, or ``None``.

    The rule (for output tensors): ignoring size-1 dimensions, no dimension may have stride 0,
    and with the remaining dimensions sorted by stride, each stride must be >= the span
    ``sum((Sizes[k] - 1) * Strides[k]) + 1`` of the dimensions with smaller strides. This is
    exact for every layout that is a permuted, padded box; a few exotic interleavings that
    happen to be one-to-one (Sizes {2, 3} with Strides {3, 2}) are rejected as well.
    """
    layout = analyse(t.sizes, t.layout_strides)
    if layout.broadcast:
        axis, n = layout.broadcast[0]
        return f"dimension {axis} has size {n} and stride 0"
    if layout.conflict is not None:
        axis, span = layout.conflict
        return (
            f"dimension {axis} (size {t.sizes[axis]}, stride {t.layout_strides[axis]}) steps "
            f"over less than the {span} elements spanned by the dimensions with smaller strides"
        )
    return None


def check_output_layout(v: Validator, path: str, t: TensorDesc) -> None:
    """Validation rule for every output tensor: its strides must not make elements overlap."""
    reason = overlap_reason(t)
    if reason is not None:
        v.fail(
            f"{path}.Strides",
            f"{show(t.layout_strides)} make output elements overlap ({reason}); DirectML "
            "leaves such writes undefined",
        )


# ---------------------------------------------------------------------------------------------
# Reading


def _fit_last(x, length: int):
    """Slices or zero-pads the last axis to ``length``; padding is never read as data."""
    m = x.shape[-1]
    last = x.ndim - 1
    if m > length:
        return lax.slice_in_dim(x, 0, length, axis=last)
    if m < length:
        config = [(0, 0, 0)] * last + [(0, length - m, 0)]
        return lax.pad(x, jnp.zeros((), x.dtype), config)
    return x


def _row_length(dims: Sequence[tuple[int, int]], i: int) -> int:
    """Elements needed to reshape into dims[i:] rows: n * stride of dims[i], 1 past the end."""
    if i < len(dims):
        n, s = dims[i]
        return n * s
    return 1


def _read_box(buf, dims: Sequence[tuple[int, int]]):
    """Reads a nested layout, ``dims`` = (size, stride) outermost first, into that shape."""
    x = _fit_last(buf, _row_length(dims, 0))
    for i, (n, s) in enumerate(dims):
        x = lax.reshape(x, x.shape[:-1] + (n, s))
        x = _fit_last(x, _row_length(dims, i + 1))  # the row's used prefix, zero-padded
    return lax.reshape(x, x.shape[:-1])


def _offsets(shape: Sequence[int], strides: Sequence[int], last: int):
    """Element offsets of every index of ``shape`` (the gather/scatter fallback only)."""
    dtype = jnp.int32 if last <= np.iinfo(np.int32).max else jnp.int64
    idx = jnp.zeros(tuple(shape), dtype)
    for axis, s in enumerate(strides):
        if s:
            idx = idx + lax.broadcasted_iota(dtype, tuple(shape), axis) * jnp.asarray(s, dtype)
    return idx


def read_tensor(buf, t: TensorDesc):
    """The logical tensor (shape ``t.sizes``) that ``t`` addresses in the 1-D ``buf``.

    Pure and traceable; ``buf`` must hold at least ``t.addressed_elements`` elements.
    """
    layout = analyse(t.sizes, t.layout_strides)
    axes = sorted(a for a, _, _ in layout.kept)
    if layout.nested:
        x = _read_box(buf, [(n, s) for _, n, s in layout.kept])
        outer_first = [a for a, _, _ in layout.kept]
        perm = tuple(outer_first.index(a) for a in axes)
        if perm != tuple(range(len(perm))):
            x = lax.transpose(x, perm)
    else:  # overlapping or interleaved reads: no box describes them
        shape = [t.sizes[a] for a in axes]
        idx = _offsets(shape, [t.layout_strides[a] for a in axes], t.addressed_elements)
        x = buf.at[idx].get(mode="promise_in_bounds")
    if tuple(x.shape) == t.sizes:
        return x
    return lax.broadcast_in_dim(x, t.sizes, tuple(axes))


# ---------------------------------------------------------------------------------------------
# Writing


def _place(old, dims: Sequence[tuple[int, int]], value):
    """``old`` (batch..., m) with the nested box ``dims`` replaced by ``value`` (batch..., *n).

    The same steps as ``_read_box``, undone: split rows, recurse into the used prefix of each
    row, concatenate the untouched remainder back, and restore the original length.
    """
    m = old.shape[-1]
    last = old.ndim - 1
    if not dims:
        head = lax.expand_dims(value, (value.ndim,))
        if m == 1:
            return head
        return lax.concatenate([head, lax.slice_in_dim(old, 1, m, axis=last)], last)
    n, s = dims[0]
    need = n * s
    head = _fit_last(old, need)
    rows = lax.reshape(head, head.shape[:-1] + (n, s))
    k = min(s, _row_length(dims, 1))
    inner = _place(lax.slice_in_dim(rows, 0, k, axis=last + 1), dims[1:], value)
    if k < s:
        inner = lax.concatenate([inner, lax.slice_in_dim(rows, k, s, axis=last + 1)], last + 1)
    head = lax.reshape(inner, head.shape)
    if m > need:  # the untouched tail after the box
        return lax.concatenate([head, lax.slice_in_dim(old, need, m, axis=last)], last)
    return _fit_last(head, m)  # drops the zero padding _fit_last added


def write_tensor(buf, value, t: TensorDesc):
    """``buf`` with the elements ``t`` addresses replaced by ``value`` (shape ``t.sizes``).

    Every other element keeps its value. Pure and traceable.
    """
    value = value.astype(buf.dtype)
    layout = analyse(t.sizes, t.layout_strides)
    if layout.broadcast or not layout.nested:
        # Only reachable for unvalidated descs: overlapping outputs are rejected by validation.
        idx = _offsets(t.sizes, t.layout_strides, t.addressed_elements)
        return buf.at[idx].set(value, mode="promise_in_bounds")
    axes = sorted(a for a, _, _ in layout.kept)
    x = lax.reshape(value, tuple(t.sizes[a] for a in axes))
    perm = tuple(axes.index(a) for a, _, _ in layout.kept)
    if perm != tuple(range(len(perm))):
        x = lax.transpose(x, perm)
    if layout.packed:
        flat = lax.reshape(x, (math.prod(x.shape),))
        if flat.shape == buf.shape:
            return flat
        return lax.dynamic_update_slice(buf, flat, (0,))
    return _place(buf, [(n, s) for _, n, s in layout.kept], x)


# ---------------------------------------------------------------------------------------------
# 4-bit buffers: DirectML's packed bytes


def unpack_4bit_buffer(buf, data_type: Any):
    """The 4-bit elements (``jnp.int4`` / ``jnp.uint4``) of a uint8 buffer of packed bytes, two
    a byte, element 0 in the low nibble: ``2 * len(buf)`` elements. Traceable; plain shifts and
    masks, so the order does not depend on how a backend lays out its own 4-bit arrays."""
    low = lax.bitwise_and(buf, jnp.uint8(0xF))
    high = lax.shift_right_logical(buf, jnp.uint8(4))
    nibbles = lax.reshape(jnp.stack([low, high], axis=-1), (2 * buf.shape[0],))
    if data_type.is_signed:  # two's complement: 8..15 are -8..-1
        wide = nibbles.astype(jnp.int8)
        nibbles = jnp.where(wide >= 8, wide - jnp.int8(16), wide)
    return nibbles.astype(data_type.numpy_dtype)


def pack_4bit_buffer(elements):
    """``unpack_4bit_buffer``'s inverse: an even number of 4-bit elements as packed bytes."""
    nibbles = lax.bitwise_and(elements.astype(jnp.int8).astype(jnp.uint8), jnp.uint8(0xF))
    pairs = lax.reshape(nibbles, (nibbles.shape[0] // 2, 2))
    return lax.bitwise_or(pairs[:, 0], lax.shift_left(pairs[:, 1], jnp.uint8(4)))


# ---------------------------------------------------------------------------------------------
# Operators in buffer mode


def _program(op: Any) -> Callable[..., tuple]:
    in_descs, out_descs, fn = tuple(op.input_descs), tuple(op.output_descs), op.fn
    n_in = len(in_descs)

    def elements(buf, t):  # a 4-bit tensor's bytes as its elements
        return unpack_4bit_buffer(buf, t.data_type) if t.data_type.bits == 4 else buf

    def written(buf, value, t):
        new = write_tensor(elements(buf, t), value, t)
        return pack_4bit_buffer(new) if t.data_type.bits == 4 else new

    def buffers(*bufs):
        arrays = [read_tensor(elements(b, t), t) for b, t in zip(bufs[:n_in], in_descs)]
        result = fn(*arrays)
        results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
        return tuple(written(b, r, t) for b, r, t in zip(bufs[n_in:], results, out_descs))

    buffers.__name__ = f"{op.name.lower()}_buffers"
    buffers.__doc__ = (
        f"Buffer-mode {op.name}: one 1-D buffer per input tensor, then one per output tensor; "
        "returns the new output buffers."
    )
    return buffers


def buffer_function(op: Any) -> Callable[..., tuple]:
    """The jitted buffer-mode function of a compiled operator or graph, cached on ``op``.

    ``fn(*input_buffers, *output_buffers) -> tuple(new_output_buffers)`` is pure (it may be
    jitted or vmapped again) and does no validation: use ``run_buffers`` for checked calls.

    Args:
        op: a ``CompiledOperator`` (or compiled graph) providing ``fn``, ``input_descs``,
            ``output_descs`` and ``name``.
    """
    cached = getattr(op, "_buffer_fn", None)
    if cached is None:
        cached = jax.jit(_program(op))
        try:
            op._buffer_fn = cached
        except AttributeError:  # an object without a slot for it: no caching, still correct
            pass
    return cached


def _check_buffer(owner: str, path: str, buf: Any, t: TensorDesc):
    want = t.buffer_dtype
    packed = " (packed bytes, two 4-bit elements a byte)" if t.data_type.bits == 4 else ""
    if not (hasattr(buf, "shape") and hasattr(buf, "dtype")):
        raise ValidationError(
            f"{owner}: {path} buffer must be a 1-D array of {want.name}{packed}, got "
            f"{type(buf).__name__}"
        )
    if len(buf.shape) != 1:
        raise ValidationError(f"{owner}: {path} buffer must be 1-D, got shape {tuple(buf.shape)}")
    if np.dtype(buf.dtype) != want:
        raise ValidationError(
            f"{owner}: {path} buffer has dtype {np.dtype(buf.dtype).name}; its DataType "
            f"{t.data_type.name} needs {want.name}{packed}"
        )
    if buf.shape[0] < t.buffer_elements:
        held = (
            f"{buf.shape[0]} bytes ({2 * buf.shape[0]} elements)"
            if packed
            else (f"{buf.shape[0]} elements")
        )
        raise ValidationError(
            f"{owner}: {path} buffer holds {held}, but its Sizes "
            f"{show(t.sizes)} and Strides {show(t.layout_strides)} address "
            f"{t.addressed_elements} (TotalTensorSizeInBytes {t.total_tensor_size_in_bytes})"
        )
    return buf


def run_buffers(op: Any, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple:
    """Runs ``op`` in buffer mode after checking every buffer.

    Args:
        op: a ``CompiledOperator`` or compiled graph.
        inputs: one 1-D buffer per input tensor, in ``op.input_paths`` order.
        outputs: one 1-D buffer per output tensor; the same array may also be an input (in-place
            binding): every input is read before any output is written.

    Returns:
        A tuple of new output buffers: addressed elements hold the result, the others keep
        their values.

    Raises:
        ValidationError: wrong buffer count, a buffer that is not 1-D, has another dtype than
            its desc's DataType (uint8 for the packed 4-bit types), or is shorter than the last
            element its desc addresses + 1.
    """
    name = op.name
    groups = (
        ("input", inputs, op.input_paths, op.input_descs),
        ("output", outputs, op.output_paths, op.output_descs),
    )
    checked = []
    for role, bufs, paths, descs in groups:
        if not isinstance(bufs, (list, tuple)):
            raise ValidationError(
                f"{name}: {role} buffers must be a list or tuple, got {type(bufs).__name__}"
            )
        if len(bufs) != len(descs):
            raise ValidationError(
                f"{name}: expected {len(descs)} {role} buffers ({', '.join(paths)}), "
                f"got {len(bufs)}"
            )
    paths = tuple(op.input_paths) + tuple(op.output_paths)
    check_x64(list(zip(paths, tuple(op.input_descs) + tuple(op.output_descs))), name)
    for _, bufs, paths, descs in groups:
        checked += [_check_buffer(name, p, b, t) for b, p, t in zip(bufs, paths, descs)]
    return tuple(buffer_function(op)(*checked))
