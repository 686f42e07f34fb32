"""validate(), compile_operator() and CompiledOperator."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax

from . import fastpath, fused, support
from . import sharding as _sharding
from .buffers import check_output_layout
from .checks import as_input, check_x64, feature_level_of
from .enums import FeatureLevel, TensorFlags
from .errors import ValidationError, Validator
from .fields import COUNT, OperatorDesc, dml_member_name
from .precision import with_half_precision
from .registry import OperatorSpec, lookup
from .tensor import TensorDesc


def _spec_of(desc: Any) -> OperatorSpec:
    if not isinstance(desc, OperatorDesc):
        raise ValidationError(
            f"expected an operator description (an OperatorDesc such as SplitOperatorDesc), "
            f"got {type(desc).__name__}"
        )
    return lookup(desc.operator_type)


def validate(desc: OperatorDesc, feature_level: Any = None) -> None:
    """Checks an operator description against DirectML's rules at a feature level.

    Pure Python on the descriptor: nothing is traced or compiled.

    Args:
        desc: an operator description such as ``SplitOperatorDesc``.
        feature_level: a ``FeatureLevel`` (or its name); ``None`` means the newest.

    Raises:
        ValidationError: at the first broken rule, naming the operator and the field path.
    """
    _validate(desc, feature_level_of(feature_level))


def _validate(desc: OperatorDesc, level: FeatureLevel) -> OperatorSpec:
    spec = _spec_of(desc)
    v = Validator(desc.operator_type)
    for f in desc.declared(COUNT):
        items = getattr(desc, f.metadata["of"])
        v.count(
            dml_member_name(f.name), getattr(desc, f.name), items, dml_member_name(f.metadata["of"])
        )
    for path, tensor in desc.output_slots():
        v.check(
            f"{path}.Flags",
            tensor.flags is TensorFlags.NONE,
            "must be NONE: OWNED_BY_DML applies to input tensors only",
        )
        check_output_layout(v, path, tensor)  # two elements on one buffer element: undefined
    missing = desc.missing_tensors()
    if missing:
        v.fail(missing[0], "is required (only a FusedActivation may leave its tensors None)")
    v.level = level
    with _derived_tensor_errors(desc, v):
        spec.validate(desc, v)
        # Every output must be what the inputs imply (operators' own rules may say it first).
        v.outputs_match(desc.output_slots(), spec.infer(desc))
    support.check_desc(spec, desc, level)
    fused.check_support(desc, level)
    return spec


@contextlib.contextmanager
def _derived_tensor_errors(desc: OperatorDesc, v: Validator) -> Iterator[None]:
    """The output the inputs and attributes imply (a convolution's of 2**34 elements) may be one
    no tensor desc can hold: its ``TensorDesc`` message, raised while an operator's rules infer
    it, would name no operator. Its tensors are all constructed already, so such a message is
    about a derived one: it is reported at the first output, as the operator's."""
    try:
        yield
    except ValidationError as e:
        if not str(e).startswith("TensorDesc."):
            raise
        v.fail(
            desc.output_slots()[0][0],
            f"cannot be the output: the inputs and attributes imply one that no tensor desc "
            f"can hold ({e})",
        )


class CompiledOperator:
    """A validated operator (or graph) and the pure JAX function that computes it.

    Attributes:
        desc: the description it was compiled from.
        feature_level: the feature level it was validated at.
        input_descs / output_descs: tuples of ``TensorDesc`` in schema order.
        fn: the pure function ``fn(*arrays)``: jit, vmap and grad compatible. Returns one array,
            or a tuple when the operator has an output array field (SPLIT) or several outputs.
    """

    def __init__(
        self,
        desc: Any,
        feature_level: FeatureLevel,
        inputs: Sequence[tuple[str, TensorDesc]],
        outputs: Sequence[tuple[str, TensorDesc]],
        lowered: Callable[..., tuple],
        tuple_result: bool,
        differentiable: bool,
        name: str,
    ):
        self.desc = desc
        self.feature_level = feature_level
        self.input_paths = tuple(p for p, _ in inputs)
        self.output_paths = tuple(p for p, _ in outputs)
        self.input_descs = tuple(t for _, t in inputs)
        self.output_descs = tuple(t for _, t in outputs)
        self.differentiable = differentiable
        self.name = name
        self._tuple_result = tuple_result or len(outputs) != 1

        self._lowered = lowered
        self.fn = fn = self._logical_fn(None)

        def checked(*arrays):
            # Runs only when jax.jit traces, i.e. for a shape/dtype signature it has not seen:
            # a cache hit pays nothing, and a bad signature fails here, before the lowering.
            self._check_traced(arrays)
            return fn(*arrays)

        self._jitted = jax.jit(checked)
        self._buffer_fn = None
        self._has_64bit = any(
            t is not None and t.data_type.is_64bit for t in self.input_descs + self.output_descs
        )
        # Calls with this many concrete JAX arrays skip the eager check (-1: never; a graph
        # with an unused input drops it in check_inputs, which the direct path would not).
        self._direct_arity = -1 if None in self.input_descs else len(self.input_descs)
        self.in_shardings: tuple | None = None  # set by compile_operator(in_shardings=...)
        self.out_shardings: tuple | None = None
        self._install_call()

    def _install_call(self) -> None:
        """Gives this instance its own subclass whose ``__call__`` is a plain function.

        Python calls an instance through its class's ``__call__``; a method there also builds a
        bound method and reads the attributes on every call (``op(x)`` over ``jax.jit(hand)(x)`` on
        a 2-core CPU: 1.11 with the method, 1.08-1.10 with this; benchmarks/RESULTS.md#operators).
        The function holds the jitted program and the arity, so concrete JAX arrays reach the
        program after a type test (and, with ``in_shardings``, a test that each is laid out so);
        everything else goes through ``CompiledOperator.__call__``. Re-run after ``_jitted`` or
        ``_direct_arity`` change (``copy.copy`` keeps the subclass of the original).
        """
        base = type(self).__dict__.get("_call_base") or type(self)
        jitted, arity, concrete = self._jitted, self._direct_arity, _CONCRETE_ARRAY_TYPES
        checked_call = base.__call__
        placed = self.in_shardings

        if placed is not None:  # arrays already where in_shardings puts them go straight in

            def call(*inputs):
                if len(inputs) == arity:
                    for x, s in zip(inputs, placed):
                        if type(x) not in concrete or (s is not None and x.sharding != s):
                            break
                    else:
                        return jitted(*inputs)
                return checked_call(self, *inputs)

        elif arity == 1:  # the common case, without the loop

            def call(*inputs):
                if len(inputs) == 1 and type(inputs[0]) in concrete:
                    return jitted(inputs[0])
                return checked_call(self, *inputs)

        else:

            def call(*inputs):
                if len(inputs) == arity:
                    for x in inputs:
                        if type(x) not in concrete:
                            break
                    else:
                        return jitted(*inputs)
                return checked_call(self, *inputs)

        call.__doc__ = base.__call__.__doc__
        namespace = {
            "__call__": staticmethod(call),
            "_call_base": base,
            "__module__": base.__module__,
            "__qualname__": base.__qualname__,
            "__doc__": base.__doc__,
        }
        self.__class__ = type(base.__name__, (base,), namespace)

    def __repr__(self) -> str:
        return f"CompiledOperator({self.name}, feature_level={self.feature_level.label})"

    def check_inputs(self, inputs: Sequence[Any]) -> list:
        """Converts inputs to arrays and checks their count, shapes and dtypes."""
        if len(inputs) != len(self.input_descs):
            raise ValidationError(
                f"{self.name}: expected {len(self.input_descs)} input arrays "
                f"({', '.join(self.input_paths)}), got {len(inputs)}"
            )
        if getattr(self, "_has_64bit", True):  # bench: skip the config read per call
            check_x64(
                zip(self.input_paths + self.output_paths, self.input_descs + self.output_descs),
                self.name,
            )
        return [
            as_input(x, path, t, self.name)
            for x, path, t in zip(inputs, self.input_paths, self.input_descs)
        ]

    def _logical_fn(self, out_shardings: tuple | None) -> Callable[..., Any]:
        """The pure logical-mode function; ``out_shardings`` (one per output, or ``None``) is
        the layout its outputs take on an explicit mesh."""
        lowered, name = self._lowered, self.name

        def fn(*arrays):
            # Arrays sharded over explicit mesh axes need the operator body run in auto mode.
            results = _sharding.run_lowered(lowered, arrays, self.output_descs, out_shardings)
            return tuple(results) if self._tuple_result else results[0]

        fn.__name__ = name.lower()
        fn.__doc__ = f"Logical-mode {name}: one array per input tensor, in schema order."
        return fn

    def _check_traced(self, arrays: Sequence[Any]) -> None:
        """Shape and dtype check on abstract values, at trace time (see ``__call__``)."""
        if self._has_64bit:
            check_x64(
                zip(self.input_paths + self.output_paths, self.input_descs + self.output_descs),
                self.name,
            )
        for x, path, t in zip(arrays, self.input_paths, self.input_descs):
            if t is not None:
                as_input(x, path, t, self.name)

    def __call__(self, *inputs: Any):
        """Logical mode: one array per input tensor; shapes equal Sizes, dtypes the DataType.

        Every instance is called through the function ``_install_call`` gives its class, which
        sends concrete JAX arrays (already canonical; jit checks them at trace time) straight to
        the program and everything else here.
        """
        # NumPy arrays and Python values are checked before jit canonicalizes their dtype
        # (a float64 array must not silently become float32).
        arrays = self.check_inputs(inputs)
        for x in arrays:
            if isinstance(x, jax.Array) and not isinstance(x, jax.core.Tracer):
                _CONCRETE_ARRAY_TYPES.add(type(x))
        if self.in_shardings is not None:
            # in_shardings is the layout promised to the program: move inputs there (no-op
            # when already so) instead of letting jit reject arrays committed elsewhere.
            arrays = [
                x if s is None else jax.device_put(x, s) for x, s in zip(arrays, self.in_shardings)
            ]
        return self._jitted(*arrays)

    def run_buffers(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple:
        """Buffer mode: DML's memory model (strides, broadcast, padding, offsets, in place).

        Args:
            inputs: one 1-D buffer per input tensor, read through the desc's sizes and strides.
            outputs: one 1-D buffer per output tensor; elements the output desc does not address
                keep their values.

        Returns:
            A tuple of new output buffers.
        """
        from .buffers import run_buffers

        return run_buffers(self, inputs, outputs)


# Types of concrete JAX arrays seen by a checked call (jax's ArrayImpl): an exact type test is
# cheaper than isinstance(x, jax.Array), whose ABC check would double the per-call overhead.
_CONCRETE_ARRAY_TYPES: set = set()


@functools.lru_cache(maxsize=4096)
def _compile_cached(
    desc: OperatorDesc, level: FeatureLevel, fast_paths: bool = True, half: bool = False
) -> CompiledOperator:
    spec = _validate(desc, level)
    # The one choice between a GPU fast path and the lax lowering (see dml_jax.fastpath).
    lowered = with_half_precision(fastpath.lowering(spec, desc, fast_paths), half)

    return CompiledOperator(
        desc,
        level,
        desc.input_slots(),
        desc.output_slots(),
        lowered,
        tuple_result=desc.has_output_array(),
        differentiable=spec.is_differentiable(desc),
        name=desc.operator_type,
    )


def with_shardings(op: CompiledOperator, in_shardings: Any, out_shardings: Any) -> CompiledOperator:
    """``op`` whose calls run under ``jax.jit(op.fn, in_shardings=..., out_shardings=...)``.

    Shardings are checked before anything is traced (see ``sharding.normalize_shardings``).
    Returns ``op`` itself when neither is given; otherwise a cached copy keyed by ``op`` (itself
    cached per description and feature level) and the shardings, sharing ``op.fn``.
    """
    ins = _sharding.normalize_shardings(
        in_shardings, op.input_descs, op.input_paths, op.name, "in_shardings"
    )
    outs = _sharding.normalize_shardings(
        out_shardings, op.output_descs, op.output_paths, op.name, "out_shardings"
    )
    if ins is None and outs is None:
        return op
    return _sharded_cached(op, ins, outs)


@functools.lru_cache(maxsize=1024)
def _sharded_cached(op: CompiledOperator, ins: tuple | None, outs: tuple | None):
    sharded = copy.copy(op)
    sharded.in_shardings, sharded.out_shardings = ins, outs
    # Arrays laid out as ``ins`` go straight to the program (on two H200s the checked call's
    # conversions and placements per call left the GPUs idle half the time of a 1 GiB REDUCE);
    # anything else is checked and moved to ``ins`` first.
    if ins is None or None in op.input_descs or len(ins) != len(op.input_descs):
        sharded._direct_arity = -1
    kwargs: dict[str, Any] = {}
    if ins is not None:
        kwargs["in_shardings"] = ins
    if outs is not None:  # the pytree of fn's result: one array, or a tuple
        kwargs["out_shardings"] = outs if op._tuple_result else outs[0]
    # ``fn`` stays shared; the call's own body gives its outputs the requested layout on an
    # explicit mesh, not the default one (``sharding.default_output_spec``) and a relayout
    # after it, which would steer XLA's propagation (a graph's weights gathered, say).
    fn = op._logical_fn(outs)
    if fastpath.spread((*(ins or ()), *(outs or ()))):
        logical = fn

        def fn(*arrays):  # over several devices: kernels XLA cannot split give way to lax
            with fastpath.sharded():
                return logical(*arrays)

    sharded._jitted = jax.jit(fn, **kwargs)
    sharded._install_call()
    return sharded


def compile_operator(
    desc: OperatorDesc,
    feature_level: Any = None,
    in_shardings: Any = None,
    out_shardings: Any = None,
    *,
    fast_paths: bool = True,
    allow_half_precision: bool = False,
) -> CompiledOperator:
    """Validates an operator description and returns its ``CompiledOperator``.

    Compiling an equal description again returns the same object (descriptions are hashable).

    Args:
        desc: an operator description such as ``ReduceOperatorDesc``.
        feature_level: a ``FeatureLevel`` (or its name); ``None`` means the newest.
        in_shardings: ``None``, one ``jax.sharding.Sharding`` for every input, or one
            ``Sharding`` or ``None`` per input tensor in schema order. ``op(...)`` then moves
            its inputs to these shardings and runs the operator as one GSPMD program.
        out_shardings: the same for the output tensors (``None`` lets XLA choose).
            ``op.fn`` stays the plain function either way; sharded arrays also work with
            ``jax.jit(op.fn)`` directly.
        fast_paths: ``True`` (the default) lets a registered GPU fast path
            (``dml_jax.fastpath``) compute the cases it covers when the program is lowered for
            CUDA; ``False`` gives the lax lowering on every platform (benchmarks time it).
        allow_half_precision: DirectML's execution flag ALLOW_HALF_PRECISION_COMPUTATION:
            float32 GEMM and convolution may then use TF32 (``dml_jax.precision``); without
            it they are computed in float32, as DirectML does.

    Raises:
        ValidationError: if the description breaks a rule, uses 64-bit types without
            ``jax_enable_x64``, or a sharding has the wrong count, type or rank.
    """
    level = feature_level_of(feature_level)
    spec = _spec_of(desc)
    del spec
    try:
        hash(desc)
    except TypeError:
        raise ValidationError(f"{desc.operator_type}: description is not hashable") from None
    op = _compile_cached(desc, level, bool(fast_paths), bool(allow_half_precision))
    check_x64(desc.input_slots() + desc.output_slots(), desc.operator_type)
    return with_shardings(op, in_shardings, out_shardings)
