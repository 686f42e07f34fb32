"""onnxruntime's ``OrtValue`` and ``IOBinding``: a model's inputs and outputs held on a device
between runs, so a loop that feeds one run's outputs to the next (a decoder's presents as its
pasts) copies nothing through the host.

An ``OrtValue`` holds a JAX array on a device (``"cpu"``; ``"cuda"``, ``"dml"`` and ``"gpu"``
name the default accelerator's, ``device_id`` which one) in the type the DML graph computes in
(64-bit integers in 32 bits, booleans as bytes: ``elements.graph_dtype``), and the ONNX type it
stands for, which ``numpy()`` gives back; a type JAX keeps only with ``jax_enable_x64``
(float64) stays a host array. A small value (at most ``HOST_HELD_MAX_BYTES``: a decoder's
token ids, mask and positions) is held on the host until something asks for its device array
(``data_ptr``, ``__dlpack__``): a run it feeds moves it in the run's own dispatch, which on a
GPU costs less than a transfer of its own (on an H200 host a small ``device_put`` took some
140 us and a small copy back some 300, about what a decode step's kernels take a layer), and
``numpy()`` reads it back without a transfer. ``InferenceSession.run`` takes OrtValues in its
feed as onnxruntime does; ``run_with_ort_values`` returns OrtValues on the session's device;
``io_binding()`` binds inputs (OrtValues or host arrays) and outputs (to a device, or into a
given OrtValue, which then holds the result) for ``run_with_iobinding``. Binding a raw device
pointer (onnxruntime's ``bind_input`` with ``buffer_ptr``) is a ``ValidationError``: a JAX
array is no buffer another library writes.

A decoder step whose pasts ``run`` pads to a bucket (``buckets``) keeps them on the device too
where they come as device OrtValues (a Concat-form step: ``pad_on_device``): each past is
padded to its bucket there and the presents come back left in their bucket (the value
remembers which positions are its own), so the next step moves each one by a single update at
a run-time position: one program a bucket, none a token, no cache through the host. Other forms
(GroupQueryAttention's shared buffer, a merged decoder) are padded as ``run`` pads them, on the
host. ``Generator`` is still the faster loop (the whole step in one dispatch).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..errors import ValidationError
from .buckets import bucket_length, padded_mask
from .elements import ONNX, elem_type_of, graph_dtype, numpy_dtype_of, to_graph_array
from .session_types import type_string

# The largest value an OrtValue made from host data holds on the host until a device array
# is asked for (bytes).
HOST_HELD_MAX_BYTES = 1 << 16

# onnxruntime's device type names -> JAX platforms
_PLATFORMS = {"cpu": "cpu", "cuda": "gpu", "dml": "gpu", "gpu": "gpu", "rocm": "gpu"}


@functools.lru_cache(maxsize=64)
def jax_device(device_type: str, device_id: int = 0) -> Any:
    """The JAX device onnxruntime's ``(device_type, device_id)`` names here."""
    kind = str(device_type).lower()
    if kind not in _PLATFORMS:
        raise ValidationError(f"{ONNX}: device_type '{device_type}': one of {sorted(_PLATFORMS)}")
    try:
        devices = jax.devices(_PLATFORMS[kind])
    except RuntimeError:
        raise ValidationError(f"{ONNX}: device_type '{device_type}': no such device here") from None
    if not isinstance(device_id, int | np.integer) or not 0 <= device_id < len(devices):
        raise ValidationError(
            f"{ONNX}: device_type '{device_type}': device_id {device_id!r} is not one of the "
            f"{len(devices)} here"
        )
    return devices[int(device_id)]


def _dtype_of(element_type: Any, where: str) -> np.dtype:
    """A NumPy dtype from onnxruntime's ``element_type``: a NumPy type or an ONNX enum."""
    if isinstance(element_type, int | np.integer) and not isinstance(element_type, bool):
        return numpy_dtype_of(int(element_type), where)
    try:
        dtype = np.dtype(element_type)
    except TypeError:
        raise ValidationError(f"{ONNX}: {where}: element_type {element_type!r}") from None
    if not elem_type_of(dtype):
        raise ValidationError(f"{ONNX}: {where}: {dtype} is no ONNX tensor type")
    return dtype


def _held_or_put(x: np.ndarray, where: str, device: Any) -> tuple[Any, Any]:
    """``x`` in the graph's type as an OrtValue holds it: (a copy on the host, ``device``) for a
    small value (``HOST_HELD_MAX_BYTES``), else (the array on ``device``, None)."""
    value = to_graph_array(x, where)
    if x.nbytes <= HOST_HELD_MAX_BYTES:  # held until a device array is asked for
        return (value if value is not x else x.copy()), device
    return jax.device_put(value, device), None


class OrtValue:
    """onnxruntime's ``OrtValue`` for tensors: see the module docstring."""

    def __init__(self, value: Any, dtype: Any, device_type: str = "cpu", padding=None, device=None):
        # a jax.Array in the graph's type, or a host array: one in the graph's type waiting to
        # be put on ``device`` (a small value), or one JAX keeps only with x64 (float64)
        self._value = value
        self._dtype = np.dtype(dtype)
        self._device_type = str(device_type).lower()
        # (axis, past, length): a decoder's present left in its bucket, the value its positions
        # [0, past) and [length, end) on ``axis`` (``pad_on_device``)
        self._padding = padding
        self._device = device  # where a host-held value goes when its device array is asked

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: Any, device_type: str = "cpu", device_id: int = 0):
        """A value holding ``numpy_obj`` on that device."""
        x = np.asarray(numpy_obj)
        where = "OrtValue.ortvalue_from_numpy"
        _dtype_of(x.dtype, where)
        device = jax_device(device_type, device_id)
        target = graph_dtype(x.dtype)
        if jax.dtypes.canonicalize_dtype(target) != target:  # float64 without x64: the host
            if device.platform != "cpu":
                raise ValidationError(
                    f"{ONNX}: {where}: {x.dtype} values stay on the host without "
                    "jax_enable_x64; give device_type 'cpu'"
                )
            return OrtValue(x.copy(), x.dtype, device_type)
        value, held = _held_or_put(x, where, device)
        return OrtValue(value, x.dtype, device_type, device=held)

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0
    ):
        """A value of zeros of that shape and type on that device."""
        dtype = _dtype_of(element_type, "OrtValue.ortvalue_from_shape_and_type")
        return OrtValue.ortvalue_from_numpy(np.zeros(tuple(shape), dtype), device_type, device_id)

    @staticmethod
    def from_dlpack(data: Any) -> OrtValue:
        """A value sharing ``data``'s memory where it can (an object with ``__dlpack__``: a
        PyTorch tensor, a JAX or NumPy array), on its device: a host tensor through NumPy in
        its own type, a device one as a JAX array (64-bit integers narrowed to 32 bits on the
        device, a value that does not fit a ``ValidationError``)."""
        where = "OrtValue.from_dlpack"
        if not hasattr(data, "__dlpack__"):
            raise ValidationError(f"{ONNX}: {where}: {type(data).__name__} has no __dlpack__")
        if int(data.__dlpack_device__()[0]) == 1:  # kDLCPU: NumPy keeps every type
            return OrtValue.ortvalue_from_numpy(np.from_dlpack(data))
        x = jax.dlpack.from_dlpack(data)
        dtype = np.dtype(x.dtype)
        target = graph_dtype(dtype)
        if target != dtype:
            if dtype.kind in "iu" and x.size:
                info = np.iinfo(target)
                lo, hi = int(jnp.min(x)), int(jnp.max(x))
                if lo < info.min or hi > info.max:
                    raise ValidationError(
                        f"{ONNX}: {where}: the {dtype} value {lo if lo < info.min else hi} does "
                        f"not fit in {target}"
                    )
            x = x.astype(target)
        return OrtValue(x, dtype, next(iter(x.devices())).platform.replace("gpu", "cuda"))

    def __dlpack__(self, **kwargs: Any) -> Any:
        """The value's DLPack capsule in its ONNX type: the device array's own where the DML
        graph keeps that type, else a host copy in it (int64, bool)."""
        value = self.jax_array()
        if isinstance(value, jax.Array) and value.dtype == self._dtype:
            return value.__dlpack__(**kwargs)
        return self.numpy().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple:
        value = self.jax_array()
        if isinstance(value, jax.Array) and value.dtype == self._dtype:
            return value.__dlpack_device__()
        return self.numpy().__dlpack_device__()

    def jax_array(self) -> Any:
        """The value as the DML graph computes with it (a JAX array, or a host array)."""
        if self._device is not None:  # a host-held value, put on its device now
            self._value, self._device = jax.device_put(self._value, self._device), None
        if self._padding is not None:  # the present's positions, once
            axis, past, length, front = self._padding
            end = self._value.shape[axis]
            keep = np.arange(length - past, end) if front else np.r_[0:past, length:end]
            self._value, self._padding = jnp.take(self._value, keep, axis), None
        return self._value

    def feed_value(self) -> Any:
        """What a run is fed: the value's device array, or a host-held value's host array in
        its ONNX type (which a run takes as it takes a NumPy array: its dispatch moves it)."""
        return self.numpy() if self._device is not None else self.jax_array()

    def numpy(self) -> np.ndarray:
        """The value on the host, in its ONNX type."""
        value = self._value if self._device is not None else self.jax_array()
        return np.asarray(value).astype(self._dtype, copy=False)

    def shape(self) -> list[int]:
        shape = list(self._value.shape)
        if self._padding is not None:
            axis, past, length, _ = self._padding
            shape[axis] = past + shape[axis] - length
        return shape

    def data_type(self) -> str:
        return type_string(elem_type_of(self._dtype))

    def element_type(self) -> int:
        """The ONNX element type (``TensorProto``'s enum: 1 float, 7 int64, ...)."""
        return elem_type_of(self._dtype)

    def device_name(self) -> str:
        return self._device_type

    def is_tensor(self) -> bool:
        return True

    def is_tensor_sequence(self) -> bool:
        return False

    def is_sparse_tensor(self) -> bool:
        return False

    def has_value(self) -> bool:
        return True

    def tensor_size_in_bytes(self) -> int:
        return int(np.prod(self.shape(), dtype=np.int64)) * self._dtype.itemsize

    def data_ptr(self) -> int:
        """The address of the device buffer (a JAX array's ``unsafe_buffer_pointer``)."""
        value = self.jax_array()
        if isinstance(value, jax.Array):
            return value.unsafe_buffer_pointer()
        return value.ctypes.data

    def update_inplace(self, np_arr: Any) -> None:
        """Replaces the value with ``np_arr`` (its shape and type) on the same device."""
        x = np.asarray(np_arr)
        if list(x.shape) != self.shape() or x.dtype != self._dtype:
            raise ValidationError(
                f"{ONNX}: OrtValue.update_inplace: an array of {x.dtype} {list(x.shape)} for a "
                f"value of {self._dtype} {self.shape()}"
            )
        if self._device is None and not isinstance(self._value, jax.Array):  # float64
            self._value = x.copy()
        else:
            device = self._device or next(iter(self._value.devices()))
            self._value, self._device = _held_or_put(x, "OrtValue.update_inplace", device)
        self._padding = None

    def _set(self, other: OrtValue) -> None:
        """The value a run wrote into this bound output (``bind_ortvalue_output``)."""
        self._value, self._dtype, self._padding = other._value, other._dtype, other._padding
        self._device = other._device

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, {self.shape()}, '{self._device_type}')"


def pad_on_device(
    roles: Any, feed: Mapping[str, Any], sizes: Any, side: Any = None
) -> tuple[dict, tuple] | None:
    """``buckets.pad_decoder_feed`` for a Concat-form decoder step whose pasts are OrtValues on
    a device (a bound loop's presents fed back): each past padded to the bucket on the device
    (a past left in its bucket by the last step moved by one update at a run-time position:
    a program a bucket, none a token), the mask on the host; returns the feed so padded and
    the presents' padding ``(axis, past, length, front)``, or None where ``run``'s host padding
    applies (another form, other shapes, host pasts, nothing to pad, or a length that may be
    padded on neither side: ``side(length)`` None). ``front``: the padding before the past
    (``side(length)`` "front": a sliding window's), where a past left in its bucket is the
    present less its first new-count zeros, padded in front to the next bucket."""
    if roles.kind == "gqa" or roles.use_cache_branch is not None:
        return None
    pasts = [n for pair in roles.past for n in pair]
    values = [feed.get(n) for n in pasts]
    if not all(isinstance(v, OrtValue) and isinstance(v._value, jax.Array) for v in values):
        return None
    mask, ids = (feed.get(n) for n in (roles.attention_mask, roles.input_ids))
    mask = mask.numpy() if isinstance(mask, OrtValue) else np.asarray(mask)
    ids = ids.shape() if isinstance(ids, OrtValue) else np.shape(ids)
    axis, shape = roles.axis, values[0].shape()
    if len(shape) != 4 or mask.ndim != 2 or len(ids) != 2:
        return None
    past, new = shape[axis], ids[1]
    if past == 0 or any(v.shape() != shape for v in values) or mask.shape[1] != past + new:
        return None
    length = bucket_length(past, sizes)
    where = "end" if side is None or length <= past else side(length)
    if length <= past or where is None:
        return None
    front = where == "front"
    out = dict(feed)
    out.update(zip(pasts, _in_bucket(values, past, length, axis, front)))
    out[roles.attention_mask] = padded_mask(mask, past, length, front)
    return out, (axis, past, length, front)


def _in_bucket(values: list[OrtValue], past: int, length: int, axis: int, front: bool) -> tuple:
    """The pasts ``values`` (``past`` positions on ``axis``) at ``length`` positions, zeros
    after (or before them, ``front``): in one dispatch where all were left in one bucket by the
    last step (or none was)."""
    paddings = {v._padding for v in values}
    padding = paddings.pop() if len(paddings) == 1 else None
    if padding is None or padding[0] != axis or padding[3] != front:  # each padded as it is
        return _padded_to(tuple(v.jax_array() for v in values), length=length, axis=axis,
                          front=front)  # fmt: skip
    tail = values[0]._value.shape[axis] - padding[2]
    if front:  # [zeros, the past, the new ones]: the first ``tail`` zeros dropped
        return _padded_to(tuple(lax.slice_in_dim(v._value, tail, None, axis=axis)
                                for v in values), length=length, axis=axis, front=True)  # fmt: skip
    return _repacked(tuple(v._value for v in values), np.int32(padding[1]), tail=tail,
                     length=length, axis=axis)  # fmt: skip


@functools.partial(jax.jit, static_argnames=("length", "axis", "front"))
def _padded_to(xs: tuple, length: int, axis: int, front: bool = False) -> tuple:
    def one(x):
        pad = [(0, 0)] * x.ndim
        pad[axis] = (length - x.shape[axis], 0) if front else (0, length - x.shape[axis])
        return jnp.pad(x, pad)

    return tuple(one(x) for x in xs)


@functools.partial(jax.jit, static_argnames=("tail", "length", "axis"))
def _repacked(xs: tuple, past, tail: int, length: int, axis: int) -> tuple:
    """Presents left in their bucket (each: its past's positions, zeros to the bucket's end,
    then ``tail`` new ones) as the next step's pasts at ``length`` positions: the new positions
    moved to follow the past (``past`` a run-time value)."""
    end = xs[0].shape[axis]
    heads = _padded_to(
        tuple(lax.slice_in_dim(x, 0, end - tail, axis=axis) for x in xs), length=length, axis=axis
    )
    news = (lax.slice_in_dim(x, end - tail, end, axis=axis) for x in xs)
    return tuple(lax.dynamic_update_slice_in_dim(h, n, past, axis) for h, n in zip(heads, news))


def on_device(
    array: Any, dtype: Any, device_type: str, device_id: int = 0, name: str = "", padding=None
) -> OrtValue:
    """A run's output ``name`` (a JAX array in the graph's type, or a host array of ``dtype``;
    a present left in its bucket, ``padding``) as a value on that device; a sequence or
    optional output is a ``ValidationError``."""
    if array is None or isinstance(array, list | tuple):
        raise ValidationError(
            f"{ONNX}: output '{name}' is a sequence or optional value: OrtValues here hold "
            "tensors (run returns it)"
        )
    device = jax_device(device_type, device_id)
    if not isinstance(array, jax.Array):
        return OrtValue.ortvalue_from_numpy(np.asarray(array).astype(dtype), device_type, device_id)
    if device not in array.devices():
        array = jax.device_put(array, device)
    return OrtValue(array, dtype, device_type, padding)


class IOBinding:
    """onnxruntime's ``IOBinding`` (``InferenceSession.io_binding()``): inputs bound by name to
    OrtValues or host arrays, outputs to a device or into an OrtValue, for
    ``run_with_iobinding``; ``get_outputs()`` gives the bound outputs of the last run as
    OrtValues, in the order they were bound."""

    def __init__(self, session: Any):
        self.session = session
        self._inputs: dict[str, Any] = {}
        self._outputs: dict[str, tuple[str, int, OrtValue | None]] = {}
        self._results: list[OrtValue] = []

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        self._inputs[name] = OrtValue.ortvalue_from_numpy(arr_on_cpu)

    def bind_input(self, name, device_type, device_id, element_type, shape, buffer_ptr) -> None:
        raise ValidationError(
            f"{ONNX}: bind_input: input '{name}': a raw device pointer cannot be bound here; bind "
            "an OrtValue (bind_ortvalue_input) or a host array (bind_cpu_input)"
        )

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        if not isinstance(ortvalue, OrtValue):
            raise ValidationError(
                f"{ONNX}: bind_ortvalue_input: input '{name}': an OrtValue, not "
                f"{type(ortvalue).__name__}"
            )
        self._inputs[name] = ortvalue

    def bind_output(
        self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
        shape: Any = None, buffer_ptr: Any = None,
    ) -> None:  # fmt: skip
        if buffer_ptr is not None:
            raise ValidationError(
                f"{ONNX}: bind_output: output '{name}': a raw device pointer cannot be bound "
                "here; bind a device (device_type) or an OrtValue (bind_ortvalue_output)"
            )
        jax_device(device_type, device_id)
        self._outputs[name] = (str(device_type), int(device_id), None)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        if not isinstance(ortvalue, OrtValue):
            raise ValidationError(
                f"{ONNX}: bind_ortvalue_output: output '{name}': an OrtValue, not "
                f"{type(ortvalue).__name__}"
            )
        self._outputs[name] = (ortvalue.device_name(), 0, ortvalue)

    def synchronize_inputs(self) -> None:
        jax.block_until_ready([v.jax_array() for v in self._inputs.values()])

    def synchronize_outputs(self) -> None:
        jax.block_until_ready([v.jax_array() for v in self._results])

    def get_outputs(self) -> list[OrtValue]:
        return list(self._results)

    def get_outputs_as_ortvaluevector(self) -> list[OrtValue]:
        return self.get_outputs()

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [v.numpy() for v in self._results]

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def run(self) -> None:
        """``run_with_iobinding``: the session's outputs for the bound inputs, each placed as
        bound."""
        if not self._outputs:
            raise ValidationError(f"{ONNX}: run_with_iobinding: no output is bound (bind_output)")
        names = list(self._outputs)
        arrays, dtypes, pads = self.session.run_on_device(names, self._inputs)
        results = []
        for name in names:
            device_type, device_id, target = self._outputs[name]
            value = on_device(arrays[name], dtypes[name], device_type, device_id, name,
                              pads.get(name))  # fmt: skip
            if target is not None:  # the given OrtValue holds the result
                target._set(value)
                value = target
            results.append(value)
        self._results = results
