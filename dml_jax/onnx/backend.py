"""An ONNX backend (``onnx.backend.base.Backend``'s shape) running models as
``dml_jax.onnx.InferenceSession``: ``prepare`` imports and wraps a model, ``run`` runs it, so
ONNX's own backend test suite (``onnx.backend.test.BackendTest``) and other tools written
against that interface run on DirectML's operators.

    from dml_jax.onnx.backend import DmlJaxBackend
    rep = DmlJaxBackend.prepare(model, "CPU")
    outputs = rep.run([x])

Devices: "CPU" runs on JAX's CPU device; "CUDA" (or "CUDA:<n>") on JAX's GPU of that index,
offered only where JAX has one. The module imports without ``onnx``; every entry point then
raises the project's ImportError saying how to install it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ValidationError
from .model import ONNX_MISSING

try:  # onnx is optional: without it the classes stand alone and every entry point says so.
    from onnx.backend.base import Backend as _Backend
    from onnx.backend.base import BackendRep as _BackendRep
except ImportError:  # pragma: no cover - exercised only without onnx
    _Backend = _BackendRep = object

# The keyword arguments ONNX's test runner passes to ``prepare`` along with a case's own ones:
# its comparison tolerances, which mean nothing to a session.
_RUNNER_KWARGS = frozenset({"rtol", "atol"})
_SESSION_KWARGS = frozenset(
    {
        "sess_options",
        "free_dimensions",
        "free_dimensions_by_denotation",
        "feature_level",
        "allow_half_precision",
        "fast_paths",
        "base_dir",
    }
)


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError(ONNX_MISSING) from None
    return onnx


def _jax_device(device: str) -> Any:
    """The JAX device for an ONNX backend device string ("CPU", "CUDA", "CUDA:1")."""
    import jax

    kind, _, index = str(device).upper().partition(":")
    platform = {"CPU": "cpu", "CUDA": "gpu"}.get(kind)
    if platform is None:
        raise ValidationError(f"ONNX backend: unknown device '{device}' (CPU or CUDA[:n])")
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        devices = []
    n = int(index) if index else 0
    if n >= len(devices):
        raise ValidationError(
            f"ONNX backend: no device '{device}': JAX has {len(devices)} {platform} device(s)"
        )
    return devices[n]


class DmlJaxBackendRep(_BackendRep):
    """A prepared model: ``run(inputs)`` runs its ``InferenceSession``.

    Attributes:
        session: the ``dml_jax.onnx.InferenceSession``.
    """

    def __init__(self, session: Any):
        self.session = session
        graph = session.model.graph
        initializers = {i.name for i in graph.initializer}
        self._all_inputs = [i.name for i in graph.input]
        self._inputs = [n for n in self._all_inputs if n not in initializers]
        self._outputs = [o.name for o in graph.output]

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        """The model's outputs, a named tuple (by position or output name) of NumPy arrays.

        ``inputs``: a list in the order of the graph's inputs that have no initializer (or of
        all its inputs, initializers overridden, when it has as many), a dict by name, or one
        array for a one-input model. A sequence input is a list of arrays, passed on as is.
        """
        from onnx.backend.base import namedtupledict

        if kwargs:
            raise TypeError(f"run() takes no keyword arguments, got {sorted(kwargs)}")
        if isinstance(inputs, Mapping):
            feed = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            inputs = list(inputs)
            names = self._all_inputs if len(inputs) == len(self._all_inputs) else self._inputs
            if len(inputs) != len(names):
                raise ValidationError(
                    f"ONNX backend: the model takes inputs {self._inputs}, got {len(inputs)}"
                )
            feed = dict(zip(names, inputs))
        outputs = self.session.run(None, feed)
        return namedtupledict("Outputs", self._outputs)(*outputs)


class DmlJaxBackend(_Backend):
    """ONNX's backend interface over ``dml_jax.onnx.InferenceSession`` (class methods only,
    as ONNX's test runner calls them)."""

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """CPU always; CUDA where JAX has a GPU."""
        try:
            _jax_device(device)
        except ValidationError:
            return False
        return True

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> DmlJaxBackendRep:
        """A ``DmlJaxBackendRep`` of ``model`` (a ModelProto, a path or serialized bytes) on
        ``device``. Keyword arguments go to ``InferenceSession`` (``free_dimensions``,
        ``feature_level``...); ONNX's test runner's ``rtol`` / ``atol`` are ignored.

        Raises:
            ImportError: without the ``onnx`` package.
            ValidationError: a model this importer cannot run, or a device JAX lacks.
        """
        _onnx()
        from .session import InferenceSession

        unknown = set(kwargs) - _SESSION_KWARGS - _RUNNER_KWARGS
        if unknown:
            raise TypeError(f"prepare() got unexpected keyword arguments {sorted(unknown)}")
        options = {k: v for k, v in kwargs.items() if k in _SESSION_KWARGS}
        session = InferenceSession(model, device=_jax_device(device), **options)
        return DmlJaxBackendRep(session)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple:
        """``prepare(model, device, **kwargs).run(inputs)``."""
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: Any,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Sequence[tuple[Any, Sequence[int]]] | None = None,
        **kwargs: Any,
    ) -> tuple:
        """Runs one ``NodeProto`` on ``inputs`` (a list, one per non-empty input name of the
        node, or a dict by name): a model of that node alone, its input types taken from the
        arrays (a list of arrays is a sequence), output types from ``outputs_info`` (dtype,
        shape) pairs where given. ``opset_version`` picks the default domain's opset (the
        newest ONNX knows otherwise)."""
        onnx = _onnx()
        helper = onnx.helper
        opset = kwargs.pop("opset_version", None)
        names = [n for n in node.input if n]
        if isinstance(inputs, Mapping):
            feed = dict(inputs)
        else:
            inputs = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(inputs) != len(names):
                raise ValidationError(
                    f"ONNX backend: node '{node.name or node.op_type}' takes inputs {names}, "
                    f"got {len(inputs)}"
                )
            feed = dict(zip(names, inputs))
        graph_inputs = [_value_info(onnx, n, feed[n]) for n in names]
        graph_outputs = []
        for k, name in enumerate(n for n in node.output if n):
            if outputs_info is not None and k < len(outputs_info):
                dtype, shape = outputs_info[k]
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                graph_outputs.append(helper.make_tensor_value_info(name, elem, list(shape)))
            else:
                graph_outputs.append(helper.make_empty_tensor_value_info(name))
        opsets = [helper.make_opsetid("", opset or onnx.defs.onnx_opset_version())]
        if node.domain not in ("", "ai.onnx"):
            opsets.append(helper.make_opsetid(node.domain, 1))
        model = helper.make_model(
            helper.make_graph([node], "run_node", graph_inputs, graph_outputs),
            opset_imports=opsets,
        )
        return cls.prepare(model, device, **kwargs).run(feed)


def _value_info(onnx: Any, name: str, value: Any) -> Any:
    """A graph input's ValueInfoProto for ``value``: a tensor of its dtype and shape, or a
    sequence of tensors for a list."""
    helper = onnx.helper
    if isinstance(value, list | tuple):
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(value[0]).dtype) if value else 1
        return helper.make_tensor_sequence_value_info(name, elem, None)
    array = np.asarray(value)
    elem = helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_value_info(name, elem, list(array.shape))


prepare = DmlJaxBackend.prepare
run_model = DmlJaxBackend.run_model
run_node = DmlJaxBackend.run_node
supports_device = DmlJaxBackend.supports_device
