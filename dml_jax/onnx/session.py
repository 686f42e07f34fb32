"""``InferenceSession``: ONNX models in onnxruntime's session shape, run as one XLA program.

Moving from ONNX Runtime is a one-line change: ``InferenceSession(path, providers=...)``,
``run(output_names, input_feed)`` returning a list of NumPy arrays, ``get_inputs()`` /
``get_outputs()`` with onnxruntime's type strings and symbolic dimension names. Beyond that, the
model is a JAX function: ``s.fn(*inputs)`` (jit, grad, vmap, sharding) and ``s.apply(params,
*inputs)`` with the floating-point initializers as arguments, so an imported model can be
differentiated and fine-tuned. ``InferenceSession(..., mesh=...)`` runs the same program over
several devices or processes: data parallelism, Megatron tensor parallelism on a "model" axis
and explicit per-input / per-initializer shardings (``placement``, docs/scaling.md).

Shapes: free dimensions fixed by name or denotation (``free_dimensions``, or
``SessionOptions.add_free_dimension_override_by_*``) are fixed for the session; those left open
take the sizes of each run's inputs. Each distinct set of input shapes is imported and compiled
once (``program``) and cached; every shape inside a program is static, so shape subgraphs fold
at import (``cache``: the program cache; ``program``: one compiled import). An input whose values a
node needs at import (a Reshape's shape fed as a graph input, say) is specialised on: its values
join the cache key, as ONNX Runtime's DirectML provider bakes in its CPU inputs;
``static_inputs`` lists them.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..errors import ValidationError
from . import fetch
from .binding import IOBinding, OrtValue, on_device
from .cache import ProgramCache, flat_feed, structure_shape
from .elements import ONNX, data_type_of, graph_dtype, numpy_dtype_of, to_graph_array
from .program import (
    CPU_BAKED_WEIGHTS_MAX_BYTES,
    CPU_MATRIX_ARGUMENT_MIN_BYTES,
    Program,
    check_compiler_options,
    compiler_options_for,
    explain,
)
from .protos import dims_of
from .session_types import ModelMetadata, NodeArg, SessionOptions, type_string, type_string_of
from .walk import tensor_elem

_ACCELERATOR_PROVIDERS = (
    "DmlExecutionProvider",
    "CUDAExecutionProvider",
    "TensorrtExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
)


def _is_tensor(info: Any) -> bool:
    return info.type.WhichOneof("value") in (None, "tensor_type")


class InferenceSession(ProgramCache):
    """An ONNX model on DirectML's operators, in onnxruntime's session shape.

    Args:
        path_or_bytes: a file path, serialized bytes or an ``onnx.ModelProto``.
        sess_options: an optional ``SessionOptions`` (free dimension overrides).
        providers: onnxruntime provider names, in order of preference: the first accelerator
            provider (DirectML, CUDA, ...) runs on the default JAX accelerator when there is one,
            ``CPUExecutionProvider`` on the CPU; None: JAX's default device.
        provider_options: accepted for compatibility (unused).
        disabled_optimizers: names of graph optimizations not to run (``optimize.REWRITES``;
            onnxruntime's keyword).
        free_dimensions: sizes of symbolic dimensions by name (``{"batch": 1}``).
        free_dimensions_by_denotation: sizes by dimension denotation (``{"DATA_BATCH": 1}``).
        device: a ``jax.Device`` or a platform name ("cpu", "gpu"); overrides ``providers``.
        feature_level: the DML feature level nodes are validated at (None: the newest).
        allow_half_precision: DirectML's ALLOW_HALF_PRECISION_COMPUTATION flag.
        fast_paths: let the GPU fast paths compute nodes (``compile_graph``).
        roll_repeats: trace each run of three or more equal consecutive blocks of nodes (a
            network's repeated layers) as one loop (``compile_graph``'s ``roll_repeats``): a
            shorter first call for a slower call (on an H100, ViT-B/16's first call 25%
            shorter, its call 47% longer: docs/onnx.md, "First-call time"). Off by default.
        base_dir: where external data files are when the model is given as bytes or a proto.
        max_memory: bytes a program's tensors may need (``check_memory``), also the limit of
            values folded at import; None or 0: no limit.
        mesh: a ``jax.sharding.Mesh`` to run on (overrides ``device``; docs/scaling.md): by
            default each input's batch dimension is split over the mesh's first axis not named
            "model" (data parallelism) and, on an axis named "model", the weights of the GEMMs
            are split Megatron-style (tensor parallelism); everything else is replicated.
            The mesh may span several processes (``jax.distributed``): each then runs the same
            session code on the same inputs and receives the whole outputs.
        shardings: ``{name: PartitionSpec or NamedSharding}`` placing model inputs and
            floating-point initializers explicitly (over ``mesh``, or the NamedShardings' mesh
            when ``mesh`` is None); they override the defaults.
        buckets: for a decoder step whose graph shows the padding of its past masked
            (``roles.find_roles``: ``position_ids`` given and each present ``Concat(past,
            new)``, also in an Optimum merged decoder's cache branch; or each present a
            GroupQueryAttention's whose mask reaches only its ``seqlens_k`` and
            ``total_sequence_length``), ``run`` pads the past (or, over a shared max-length
            buffer, the mask alone) to a bucket length, the mask with zeros over the padding,
            and cuts the padding out of the presents, so a loop of ``run`` calls compiles a
            program per bucket, not per token (docs/onnx.md, "Generation"); a Concat-form step
            is first probed at each length (``padding_probe``: padded after the past, before
            it where a sliding window would move, else exact). None: powers of two
            from 16 where the graph shows it; False: every length exact; a list: those lengths.
            Elsewhere it changes nothing.
        compiler_options: XLA options for the compiles ``run`` makes (``jax.jit``'s
            ``compiler_options``), over the session's defaults on GPUs
            (``GPU_COMPILER_OPTIONS``: cuBLAS matrix products; ``{"xla_gpu_enable_triton_gemm":
            True}`` gives XLA's search over Triton kernels back: docs/onnx.md, "First-call
            time") and on CPUs (``CPU_COMPILER_OPTIONS``: convolutions on XLA's own kernels,
            not YNNPACK's). ``fn`` is jitted by the caller, with the caller's options
            (``compiler_options`` the attribute holds the session's).

    Raises:
        ImportError: without the ``onnx`` package.
        ValidationError: a file that is not an ONNX model, or one this importer cannot run.
    """

    def __init__(
        self,
        path_or_bytes: Any,
        sess_options: SessionOptions | None = None,
        providers: Sequence[Any] | None = None,
        provider_options: Any = None,
        *,
        disabled_optimizers: Sequence[str] | None = None,
        free_dimensions: Mapping[str, int] | None = None,
        free_dimensions_by_denotation: Mapping[str, int] | None = None,
        device: Any = None,
        feature_level: Any = None,
        allow_half_precision: bool = False,
        fast_paths: bool = True,
        roll_repeats: bool = False,
        base_dir: str | None = None,
        max_memory: int | None = None,
        mesh: Any = None,
        shardings: Mapping[str, Any] | None = None,
        compiler_options: Mapping[str, Any] | None = None,
        buckets: Any = None,
    ):
        from .model import check_model, load_onnx

        self._compiler_options = check_compiler_options(compiler_options, ONNX)
        from .buckets import bucket_sizes

        bucket_sizes(buckets, True, ONNX)  # checked before anything is imported
        self._buckets_option = buckets

        # On a mesh, weights in external data are mapped, not read: each device's block is
        # read when it is placed.
        sharded = mesh is not None or bool(shardings)
        self._model = load_onnx(path_or_bytes, base_dir=base_dir, map_weights=sharded)
        if base_dir is None and isinstance(path_or_bytes, str | os.PathLike):
            base_dir = os.path.dirname(os.fspath(path_or_bytes))
        self._base_dir = base_dir
        self._max_memory = max_memory or None
        check_model(self._model)
        options = sess_options or SessionOptions()
        self._sess_options = options
        free = dict(options.free_dimension_overrides)
        free.update(
            {k.upper(): v for k, v in options.free_dimension_overrides_by_denotation.items()}
        )
        free.update({k: int(v) for k, v in (free_dimensions or {}).items()})
        free.update({k.upper(): int(v) for k, v in (free_dimensions_by_denotation or {}).items()})
        self._free = free
        from .optimize import disabled_names, level_name

        self._level = level_name(options.graph_optimization_level)
        self._disabled = disabled_names(disabled_optimizers)
        self._saved_to = os.fspath(options.optimized_model_filepath or "")
        self._feature_level = feature_level
        self._allow_half = bool(allow_half_precision)
        self._fast_paths = bool(fast_paths)
        self._device, self._providers = _device_of(device, providers)
        self._roll = bool(roll_repeats)
        self._programs: dict[tuple, Program] = {}
        self._static: set[str] = set()
        self._size_needs: dict[tuple, Any] = {}  # the segments before a program (cache.py)
        graph = self._model.graph
        init_names = {i.name for i in graph.initializer}
        self._inputs = tuple(i for i in graph.input if i.name not in init_names)
        self._overridable = tuple(i for i in graph.input if i.name in init_names)
        for i in self._inputs:
            if i.type.WhichOneof("value") not in ("tensor_type", "sequence_type", "optional_type"):
                raise ValidationError(f"{ONNX}: input '{i.name}': only tensor inputs are supported")
            data_type_of(tensor_elem(i.type), f"input '{i.name}'")
        self._input_dtypes = tuple(
            numpy_dtype_of(tensor_elem(i.type), f"input '{i.name}'") for i in self._inputs
        )
        self._params: dict[str, Any] | None = None
        self._layout = None
        if mesh is not None or shardings:
            from .placement import MeshLayout

            described = [
                (
                    i.name,
                    self._declared(i) if i.type.tensor_type.HasField("shape") else None,
                    [d.denotation for d in i.type.tensor_type.shape.dim],
                )
                for i in self._inputs
            ]
            inits = {i.name: (list(i.dims), i.data_type) for i in graph.initializer}
            self._layout = MeshLayout(mesh, shardings, described, inits)
            self._output_dims = {o.name: dims_of(o.type) for o in graph.output}
            self._disabled |= self._layout.disabled_rewrites

    @property
    def compiler_options(self) -> dict[str, Any]:
        """The XLA options of the compiles ``run`` makes: ``GPU_COMPILER_OPTIONS`` where the
        session runs on GPUs, ``CPU_COMPILER_OPTIONS`` on CPUs (where XLA takes them), with
        the ``compiler_options`` it was made with over them. A caller who jits ``fn`` can pass
        them to ``jax.jit``."""
        return compiler_options_for(self._compiler_options, self._run_device.platform)

    @property
    def _run_device(self) -> Any:
        """The device ``run`` runs on (on a mesh, its first: a mesh is of one platform)."""
        return self._layout.mesh.devices.flat[0] if self._layout is not None else self._device

    # -- onnxruntime's description calls ---------------------------------------------------------

    def get_inputs(self) -> list[NodeArg]:
        return [self._node_arg(i) for i in self._inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [self._node_arg(o) for o in self._model.graph.output]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [self._node_arg(i) for i in self._overridable]

    def _node_arg(self, info: Any) -> NodeArg:
        tensor = info.type.tensor_type
        shape = self._declared(info) if tensor.HasField("shape") else None
        if info.type.WhichOneof("value") in ("sequence_type", "optional_type"):
            shape = []
        return NodeArg(info.name, type_string_of(info.type), shape)

    def _declared(self, info: Any) -> list:
        """An input's declared shape with the session's free dimension overrides applied (by
        name, then by denotation): ints, names of dims left open, None for unnamed ones."""
        out = []
        for d, proto in zip(dims_of(info.type), info.type.tensor_type.shape.dim):
            if isinstance(d, str) and d in self._free:
                d = self._free[d]
            elif not isinstance(d, int) and proto.denotation.upper() in self._free:
                d = self._free[proto.denotation.upper()]
            out.append(d)
        return out

    def get_modelmeta(self) -> ModelMetadata:
        m = self._model
        return ModelMetadata(
            m.producer_name,
            m.graph.name,
            m.domain,
            m.doc_string,
            m.graph.doc_string,
            int(m.model_version),
            {p.key: p.value for p in m.metadata_props},
        )

    def get_providers(self) -> list[str]:
        return list(self._providers)

    def get_provider_options(self) -> dict:
        return {p: {} for p in self._providers}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    @property
    def model(self) -> Any:
        """The ``onnx.ModelProto``."""
        return self._model

    @property
    def mesh(self) -> Any:
        """The mesh the session runs on (its axes all Auto), or None on one device."""
        return self._layout.mesh if self._layout is not None else None

    def layout(self, shapes: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
        """On a mesh, where the program for inputs of ``shapes`` (default: the last one
        compiled) places each model input, initializer and output: ``{name: PartitionSpec}``.
        The initializers named: the parameters, the integer weights the program reads unchanged
        and the 4-bit codes it splits (a quantized model's); one absent is embedded whole in the
        program, held whole on each device, or folded into another value."""
        if self._layout is None:
            raise ValidationError(f"{ONNX}: layout: the session has no mesh")
        program = self._program_or_last(shapes, "layout")
        imp, lay = program.imported, program.layout
        out = {n: s.spec for n, s in zip(imp.input_names, lay.inputs)}
        names = imp.constant_names or imp.params
        out.update(
            {n: s.spec for n, s in zip(names, lay.constants) if n is not None and s is not None}
        )
        named = dict(imp.node_names)  # the 4-bit codes the layout splits, by initializer
        out.update({named[c]: s.spec for n, s in lay.nodes if (c := imp.graph.nodes[n]) in named})
        out.update({n: s.spec for n, s in zip(imp.output_names, lay.outputs)})
        return out

    @property
    def static_inputs(self) -> tuple[str, ...]:
        """The inputs this session specialises on (their values join the cache key)."""
        return tuple(sorted(self._static))

    # -- running ---------------------------------------------------------------------------------

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any], run_options=None
    ) -> list[np.ndarray]:
        """Runs the model: ``input_feed`` maps input names to arrays (or ``OrtValue``s);
        returns the outputs named in ``output_names`` (None or empty: all), as NumPy arrays in
        the model's dtypes. On the CPU the session's weights are compiled into the program (up
        to ``CPU_BAKED_WEIGHTS_MAX_BYTES``) but for its matrices (``_run_params``); elsewhere,
        and in ``apply``, they are arguments."""
        return self._run(output_names, input_feed, on_device=False)[0]

    def run_on_device(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, np.dtype], dict[str, tuple]]:
        """``run``'s outputs left where the program wrote them, for OrtValues (``binding``):
        ``({name: array}, {name: the output's NumPy dtype}, {name: padding})``, each a JAX
        array in the DML graph's type, or, where ``run`` reshapes its outputs on the host
        (sequences, a mesh, a decoder's presents cut out of their bucket there), the host array
        ``run`` gives. A decoder step's pasts given as device values are padded to their bucket
        on the device (``binding.pad_on_device``) and its presents left padded: ``padding``
        ``(axis, past, length)`` says which of their positions are the present's."""
        return self._run(output_names, input_feed, on_device=True)

    def io_binding(self) -> IOBinding:
        """onnxruntime's ``IOBinding`` for ``run_with_iobinding`` (``binding``)."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options=None) -> None:
        """Runs the model on ``iobinding``'s inputs into its outputs (``binding``)."""
        if not isinstance(iobinding, IOBinding) or iobinding.session is not self:
            raise ValidationError(
                f"{ONNX}: run_with_iobinding takes this session's io_binding(), not "
                f"{type(iobinding).__name__}"
            )
        iobinding.run()

    def run_with_ort_values(
        self, output_names: Sequence[str] | None, input_dict_ort_values: Mapping[str, Any],
        run_options=None,
    ) -> list[OrtValue]:  # fmt: skip
        """``run`` on OrtValues (or arrays), the outputs as OrtValues on the session's device."""
        arrays, dtypes, pads = self.run_on_device(output_names, input_dict_ort_values)
        kind = "cpu" if self._device.platform == "cpu" else "cuda"
        index = jax.devices(self._device.platform).index(self._device)
        return [on_device(arrays[n], dtypes[n], kind, index, n, pads.get(n)) for n in arrays]

    def _run(self, output_names, input_feed, on_device: bool) -> tuple[Any, Any, Any]:
        if not isinstance(input_feed, Mapping):
            raise ValidationError(f"{ONNX}: input_feed must be a dict of name -> array")
        known, required, outputs = self._feed_names
        unknown = sorted(set(input_feed) - known)
        if unknown:
            raise ValidationError(
                f"{ONNX}: unknown input names {unknown}; the model's inputs are "
                f"{[i.name for i in self._inputs]}"
            )
        missing = [n for n in required if n not in input_feed]
        if missing:
            raise ValidationError(f"{ONNX}: required inputs {missing} are missing")
        wanted = list(output_names or outputs)
        for name in wanted:
            if name not in outputs:
                raise ValidationError(f"{ONNX}: '{name}' is not an output; outputs: {outputs}")
        overrides = tuple(i.name for i in self._overridable if i.name in input_feed)
        buckets = None if overrides or self._layout is not None else self._run_buckets()
        unpad = padded = None
        if on_device and buckets is not None:  # device pasts padded there, presents left so
            from .binding import pad_on_device

            roles, sizes, side = buckets
            padded = pad_on_device(roles, input_feed, sizes, side)
            if padded is not None:
                input_feed, padded = padded
        arrays = [self._checked(i, dt, input_feed.get(i.name))  # an optional left out: None
                  for i, dt in zip(self._inputs, self._input_dtypes)]  # fmt: skip
        extra = [np.asarray(input_feed[n]) for n in overrides]
        if buckets is not None and padded is None:
            from .buckets import pad_decoder_feed

            roles, sizes, side = buckets
            names = [i.name for i in self._inputs]
            host = [np.asarray(a) if isinstance(a, jax.Array) else a for a in arrays]
            arrays, unpad = pad_decoder_feed(roles, names, host, sizes, side)
        program, resumed = self._program_and_resumed(arrays, overrides, extra,
                                                     self._layout is None)  # fmt: skip
        feed = dict(zip(self._names(overrides), arrays + extra), **resumed)
        feed = flat_feed(feed, program.imported)
        imported = program.imported
        with jax.enable_x64(True) if program.needs_x64 else contextlib.nullcontext():
            jitted, params, args = self._dispatch(program, feed)
            nested = any(kind == "output" for kind, _, _ in imported.layouts)
            packed = not on_device and fetch.packs_for(program, self._device.platform)
            if packed:  # every output in one copy (``fetch``)
                jitted = program.jitted_on(self._run_device, packed=True)
                outs = fetch.host_outputs(jitted, program.packed_layouts, params, args)
            else:
                outs = jitted(params, *args)
            if on_device and not (unpad or nested or program.needs_x64 or program.layout):
                found = dict(zip(imported.output_names, zip(outs, imported.output_dtypes)))
                presents = [n for pair in buckets[0].present for n in pair] if padded else []
                pads = dict.fromkeys(presents, padded)
                return ({n: found[n][0] for n in wanted}, {n: found[n][1] for n in wanted},
                        {n: pads[n] for n in wanted if n in pads})  # fmt: skip
            result = fetch.on_host(program, outs, fetched=packed)
        result = fetch.nested_result(result, imported)
        if unpad is not None:
            result = unpad(result)
        if on_device:
            found = {n: result[n] for n in wanted}
            return found, {n: getattr(v, "dtype", None) for n, v in found.items()}, {}
        return [result[n] for n in wanted], None, None

    @functools.cached_property
    def _feed_names(self) -> tuple[frozenset, tuple[str, ...], list[str]]:
        """``run``'s checks of a feed: the names it may hold, those it must (every input but
        an optional one) and the outputs' names."""
        known = frozenset(i.name for i in self._inputs) | {i.name for i in self._overridable}
        optional = "optional_type"
        required = tuple(i.name for i in self._inputs if i.type.WhichOneof("value") != optional)
        return known, required, [o.name for o in self._model.graph.output]

    def _dispatch(self, program: Program, feed: Mapping[str, Any]) -> tuple[Any, dict, list]:
        """What ``run`` calls for ``program`` on ``feed`` (flat, by the program's input names):
        its jitted function for the session's device, the parameters it passes and the
        inputs placed on the device (or the mesh)."""
        jitted = program.jitted_on(self._run_device)
        names = program.imported.input_names
        if program.layout is None:
            params = self._run_params(program)
            args = [x if isinstance(x := feed[n], jax.Array)
                    else to_graph_array(x, f"input '{n}'") for n in names]  # fmt: skip
            # Host arrays go to the call as they are where it runs on the session's device
            # anyway (its parameters are there, or that device is JAX's default): the call
            # moves them in its own dispatch, some 0.2 ms sooner than ``device_put`` on a CPU.
            # Else one ``device_put`` for every input (a decoder step's dozens of pasts);
            # values a segment handed on (``resume``) are on the device in their graph types.
            # Device arrays elsewhere (an OrtValue on another device) are put there too.
            default = jax.config.jax_default_device is None and self._device == jax.devices()[0]
            if not (params or default):
                args = jax.device_put(args, self._device)
            elif any(isinstance(x, jax.Array) and x.devices() != {self._device} for x in args):
                args = [jax.device_put(x, self._device) if isinstance(x, jax.Array) else x
                        for x in args]  # fmt: skip
            return jitted, params, args
        from .placement import place

        args = [place(to_graph_array(feed[n], f"input '{n}'"), s)
                for n, s in zip(names, program.layout.inputs)]  # fmt: skip
        return jitted, self._run_params(program), args

    def _device_call(self, input_feed: Mapping[str, Any]) -> Callable[[], tuple]:
        """``run``'s program for ``input_feed`` (every input, none padded) as a call with no
        argument: its inputs already on the device, its outputs left there (what the bench
        suites time as the user's path, without the copies in and out)."""
        arrays = [self._checked(i, dt, input_feed.get(i.name))
                  for i, dt in zip(self._inputs, self._input_dtypes)]  # fmt: skip
        program, resumed = self._program_and_resumed(arrays, resume=self._layout is None)
        feed = flat_feed(dict(zip(self._names(()), arrays), **resumed), program.imported)
        jitted, params, args = self._dispatch(program, feed)
        if any(not isinstance(x, jax.Array) for x in args):  # ``run`` would pass host arrays
            args = jax.device_put(args, self._device)
        return functools.partial(jitted, params, *args)

    def _run_buckets(self) -> tuple[Any, tuple[int, ...], Any] | None:
        """For a decoder step whose graph shows its past padding masked (``buckets``), its roles,
        bucket sizes and the side a padded length may take its padding on
        (``padding_probe.padded_side``, for a Concat-form step: None where it need not be
        asked): ``run`` pads a past to a bucket on that side, or not at all where neither
        side keeps what the step computes; else None (found once)."""
        if "_buckets_found" not in self.__dict__:
            from .buckets import bucket_sizes
            from .padding_probe import padded_side
            from .roles import roles_of

            found = None
            if self._buckets_option is not False:
                try:
                    roles = roles_of(self)
                except ValidationError:
                    roles = None
                if roles is not None and roles.kind == "other" and self._buckets_option:
                    raise ValidationError(
                        f"{ONNX}: buckets were asked for, but the graph does not show a padded "
                        f"past masked: {roles.why}"
                    )
                if roles is not None:
                    # Concat steps are candidates, the probe asked at each length (one without
                    # position_ids may number its tokens from the mask: BLOOM's ALiBi);
                    # GroupQueryAttention's always; any other, none
                    concat = roles.kind == "concat"
                    sizes = bucket_sizes(self._buckets_option, roles.kind != "other", ONNX)
                    side = functools.partial(padded_side, self, roles) if concat else None
                    found = None if sizes is None else (roles, sizes, side)
            self._buckets_found = found
        return self._buckets_found

    def _names(self, overrides: tuple[str, ...]) -> list[str]:
        return [i.name for i in self._inputs] + list(overrides)

    def _checked(self, info: Any, dtype: np.dtype, x: Any, type_proto: Any = None) -> Any:
        where = f"input '{info.name}'"
        type_proto = info.type if type_proto is None else type_proto
        kind = type_proto.WhichOneof("value")
        if kind == "optional_type":  # None when empty
            inner = type_proto.optional_type.elem_type
            return None if x is None else self._checked(info, dtype, x, inner)
        if kind == "sequence_type":  # a list of arrays
            if not isinstance(x, list | tuple):
                raise ValidationError(f"{ONNX}: {where} is a sequence: give a list of arrays")
            inner = type_proto.sequence_type.elem_type
            return [self._checked(info, dtype, a, inner) for a in x]
        if isinstance(x, jax.core.Tracer):
            raise ValidationError(f"{ONNX}: {where}: run takes arrays; use .fn under jax.jit")
        if isinstance(x, OrtValue):
            x = x.feed_value()
        if isinstance(x, jax.Array) and x.dtype == graph_dtype(dtype):
            return x  # on its device, in the graph's type (an OrtValue's): no copy
        x = np.asarray(x)
        if x.dtype != dtype:
            raise ValidationError(
                f"{ONNX}: {where} must be {type_string(tensor_elem(info.type))}, got "
                f"an array of {x.dtype}"
            )
        return x

    # -- the JAX function ------------------------------------------------------------------------

    @property
    def params(self) -> dict[str, np.ndarray]:
        """The floating-point initializers by name: the model's parameters, for ``apply``."""

        if self._params is None:
            self._params = {
                i.name: self._initializer(i)
                for i in self._model.graph.initializer
                if i.data_type in (1, 10, 11)
            }
        return self._params

    def _initializer(self, init: Any) -> np.ndarray:
        """An initializer's value, read once (shared with the imports)."""
        from .protos import array_of

        arrays = self._initializer_arrays
        if init.name not in arrays:
            array = array_of(init, self._base_dir)
            array.setflags(write=False)  # shared with every import: never changed
            arrays[init.name] = array
        return arrays[init.name]

    def _run_params(self, program: Program) -> dict[str, Any]:
        """The parameters ``run`` passes: on a mesh, each device's block of them as the
        program's layout places them; on the CPU, while the program's constants (the
        session's weights, as imported) are at most ``CPU_BAKED_WEIGHTS_MAX_BYTES``, only its
        matrices (``CPU_MATRIX_ARGUMENT_MIN_BYTES``), the rest compiled in; else the session's
        parameters on its device but the smallest (``RUN_BAKED_PARAM_MAX_BYTES``), compiled
        in."""
        if program.layout is not None:
            return self._mesh_params(program)
        cpu = self._device.platform == "cpu"
        x64 = bool(jax.config.read("jax_enable_x64"))
        if cpu and program.imported.constant_bytes <= CPU_BAKED_WEIGHTS_MAX_BYTES:
            cached = program.__dict__.setdefault("_cpu_params", {})
            if x64 not in cached:
                imp = program.imported
                matrices = sorted({p for c, p in zip(imp.constants, imp.params) if p is not None
                                   and c.ndim == 2 and c.nbytes >= CPU_MATRIX_ARGUMENT_MIN_BYTES}
                                  & set(self.params))  # fmt: skip
                cached[x64] = self._device_params(matrices)  # the rest never leave the host
            return cached[x64]
        cached = program.__dict__.setdefault("_run_params", {})
        if x64 not in cached:
            small = {program.imported.params[j] for j in program.small_params}
            passed = sorted(set(self.params) - small)
            params = {**self._device_params(passed), **self._held_params(program)}
            cached[x64] = {**params, **self._folded_params(program, params)}
        return cached[x64]

    def _folded_params(self, program: Program, params: dict[str, Any]) -> dict[str, Any]:
        """The outputs ``program`` computes from the session's weights alone
        (``Program.folded``), computed once, on the session's device."""
        if not program.folded:
            return {}
        from .. import fastpath

        def fold(params):
            with fastpath.target_platform(fastpath.platform_of(self._device)):
                return program.fold(params)

        return jax.jit(fold)(params)

    def _held_params(self, program: Program) -> dict[str, Any]:
        """The program's large constants that are no parameter (``Program.held``) on the
        session's device, each value once for every program that holds it."""
        store = self.__dict__.setdefault("_held", {})
        out = {}
        for key, h in program.held.items():
            if h.same not in store:
                store[h.same] = jax.device_put(h.value(), self._device)
            out[key] = store[h.same]
        return out

    def _device_params(self, names: Any = None) -> dict[str, Any]:
        """The parameters (those of ``names`` where given) on the session's device, each put
        there once per x64 mode (without it JAX holds float64 parameters as float32)."""
        x64 = bool(jax.config.read("jax_enable_x64"))
        cache = self.__dict__.setdefault("_on_device", {}).setdefault(x64, {})
        params = self.params
        if names is None and len(cache) == len(params):
            return cache  # every parameter there already (a decode step asks at every token)
        for k in params if names is None else names:
            if k not in cache:
                cache[k] = jax.device_put(to_graph_array(params[k], f"initializer '{k}'"),
                                          self._device)  # fmt: skip
        return cache if names is None else {k: cache[k] for k in names}

    def _mesh_params(self, program: Program) -> dict[str, Any]:
        """The program's parameters and held constants placed as its layout says
        (``placement.program_params``), each placed once per sharding for every program."""
        from .placement import program_params

        cache = self.__dict__.setdefault("_on_mesh", {})
        return program_params(program, self.params, self.mesh, cache)

    def apply(self, params: Mapping[str, Any] | None, *inputs: Any) -> tuple:
        """The model as a pure function of its parameters and inputs (one array per input of
        ``get_inputs()``, in order): a tuple of outputs. Differentiable in ``params``; a
        parameter missing from ``params`` keeps its initializer value. On a mesh the program
        runs as one jitted GSPMD program whose inputs, parameters and outputs take the
        session's layout (``params`` None: the session's own, already placed)."""
        if len(inputs) != len(self._inputs):
            raise ValidationError(
                f"{ONNX}: expected {len(self._inputs)} inputs "
                f"{[i.name for i in self._inputs]}, got {len(inputs)}"
            )
        values = {}
        for info, x in zip(self._inputs, inputs):
            if info.name in self._static and not isinstance(x, jax.core.Tracer):
                values[info.name] = np.asarray(x)
        shapes = [structure_shape(x) for x in inputs]
        try:
            program = self.program(shapes, values)
        except ValidationError:
            if any(isinstance(x, jax.core.Tracer) for x in inputs):
                raise
            program = self._program_for(
                [np.asarray(x) if _is_tensor(i) else x for i, x in zip(self._inputs, inputs)]
            )
        imp = program.imported
        call = program.apply
        if program.layout is not None:
            # Inside a caller's trace the program is traced into the caller's jit, which
            # compiles it with the caller's options (JAX takes options on the outermost jit).
            traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((params, inputs)))
            if not traced:
                from .. import fastpath

                # (inside ``fn_on``: the program's jit for its platform, not the portable one)
                call = program.jitted_for(fastpath.target())
            if params is None:
                params = self._mesh_params(program)
        elif params is None:
            params = self.params
        if not imp.layouts:
            return call(params, *self._placed(program, inputs))
        # Sequence and optional values: their tensors in, lists and None out.
        feed = flat_feed({i.name: x for i, x in zip(self._inputs, inputs)}, imp)
        outs = call(params, *self._placed(program, [feed[n] for n in imp.input_names]))
        result = fetch.nested_result(dict(zip(imp.output_names, outs)), imp)
        return tuple(result[o.name] for o in self._model.graph.output)

    def _placed(self, program: Program, inputs: Sequence[Any]) -> list:
        """On a mesh, concrete input arrays placed block by block as the program's layout says
        (a host array is never sent whole to one device); tracers and None pass unchanged."""
        if program.layout is None:
            return list(inputs)
        from .placement import place

        out = []
        for x, s, n in zip(inputs, program.layout.inputs, program.imported.input_names):
            if x is not None and not isinstance(x, jax.core.Tracer | jax.Array):
                x = to_graph_array(x, f"input '{n}'")  # 64-bit integers as 32 (placed so)
            out.append(x if x is None or isinstance(x, jax.core.Tracer) else place(x, s))
        return out

    def fn(self, *inputs: Any) -> tuple:
        """The model as a pure JAX function of its inputs (parameters at their initializer
        values): a tuple of outputs, in ``get_outputs()`` order."""
        return self.apply(None, *inputs)

    def fn_on(self, device: Any = None) -> Callable[..., tuple]:
        """``fn`` for one device's platform (default: the session's device, or its mesh's):
        traced there alone, as ``run`` traces its programs, so that every platform choice of
        the lowerings (a GPU fast path or its lax lowering; a convolution's CPU form or XLA's)
        traces one branch, not all (a shorter first call: on an H100 ConvNeXt-T's trace and
        lowering took 2.4 s less). ``fn`` stays portable; the function this returns is
        lowered for that platform only (a GPU fast path fails to lower for a CPU). Each call
        returns a new function, so that ``jax.jit`` caches its traces apart from ``fn``'s."""
        from .. import fastpath

        platform = fastpath.platform_of(self._run_device if device is None else device)

        def fn_on(*inputs: Any) -> tuple:
            with fastpath.target_platform(platform):
                return self.apply(None, *inputs)

        return fn_on

    def explain(self, shapes: Sequence[Sequence[int]] | None = None) -> str:
        """A line per ONNX node: how it was imported (DML operators, folded, view, function
        body) and the DML operators it is computed by after the graph optimizations, for inputs
        of ``shapes`` (default: the last program compiled); then, when any rewrite fired, a
        line ``optimizations: NAME xCOUNT, ...``; for a decoder step, a line ``buckets: ...``
        saying whether ``run`` pads its past to bucket lengths, and why; for a program run
        after segments, a line ``segments: ...``: what run() computed first and read on the
        host (an If's condition, a Loop's iteration count, a data-dependent size), and the
        values this program was imported for."""
        program = self._program_or_last(shapes, "explain")
        text = explain(program.imported)
        if program.segments:
            read = "; ".join(f"{k} = {', '.join(map(str, v))}" for k, v in program.segments)
            text += f"\nsegments (read on the host before this program): {read}"
        line = self._buckets_line()
        return f"{text}\n{line}" if line else text

    def _buckets_line(self) -> str:
        """What ``run`` does with a decoder step's past length (empty for other models)."""
        from .buckets import run_buckets_line
        from .roles import roles_of

        try:
            roles = roles_of(self)
        except ValidationError:
            return ""
        try:
            found = self._run_buckets()
        except ValidationError as e:  # buckets asked for where none may be padded
            return f"buckets: refused ({e})"
        return run_buckets_line(roles, found, self._buckets_option)

    def _program_or_last(self, shapes: Sequence[Sequence[int]] | None, what: str) -> Any:
        """The program for inputs of ``shapes``, or the last one compiled; ``what`` names the
        caller in the error when there is neither."""
        if shapes is not None:
            return self.program(shapes)
        if self._programs:
            return list(self._programs.values())[-1]
        raise ValidationError(f"{ONNX}: {what} needs input shapes before the first run")

    def __repr__(self) -> str:
        return (
            f"InferenceSession(inputs {[i.name for i in self._inputs]}, outputs "
            f"{[o.name for o in self._model.graph.output]}, {len(self._programs)} programs)"
        )


def _device_of(device: Any, providers: Sequence[Any] | None) -> tuple[Any, tuple[str, ...]]:
    """The JAX device a session runs on, and the provider names it reports."""
    if device is not None:
        if isinstance(device, str):
            try:
                device = jax.devices(device)[0]
            except RuntimeError as e:
                raise ValidationError(f"{ONNX}: no '{device}' device: {e}") from None
        name = "CPUExecutionProvider" if device.platform == "cpu" else "CUDAExecutionProvider"
        return device, (name,)
    default = jax.devices()[0]
    if not providers:
        return default, (
            "CPUExecutionProvider" if default.platform == "cpu" else "CUDAExecutionProvider",
        )
    names = [p[0] if isinstance(p, tuple | list) else p for p in providers]
    for name in names:
        if name in _ACCELERATOR_PROVIDERS and default.platform != "cpu":
            return default, (name,)
        if name == "CPUExecutionProvider":
            return jax.devices("cpu")[0], (name,)
    return jax.devices("cpu")[0], ("CPUExecutionProvider",)
