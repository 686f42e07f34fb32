"""Running a loaded model: device choice, memory budget, the executor and its timing."""

from __future__ import annotations

import contextlib
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from ..jsonforms import COMPILE_OP
from .commands import DispatchCommand, PrintCommand, PrintTemporaryCommand, WriteFileCommand
from .context import ModelError, cannot_allocate
from .load import Model, load_model
from .output import format_resource, write_file
from .plan import DispatchPlan, compile_plan

# ---------------------------------------------------------------------------------------------
# Execution


@dataclass
class RunOptions:
    """DxDispatch's timing options plus dml_jax's own.

    Attributes:
        dispatch_iterations: samples per dispatch command (``-i``).
        dispatch_repeat: dispatches per sample; a sample is the time divided by it (``-r``).
        milliseconds_to_run: run samples until this much time passed (``-t``; overrides ``-i``).
        warmup_samples: at most this many leading samples are "cold" (``-w``).
        timing_verbosity: 0, 1 or 2 (``-v``).
        dispatch_interval: minimum milliseconds between samples (``-I``).
        bytes_as_chars: print INT8/UINT8 as characters, as DxDispatch does.
        max_memory: bytes the model may use (``--max-memory``); None: derived from the device
            (``default_memory_budget``); 0: no limit.
        allow_outside_paths: files may be read or written outside the model's folder.
        overwrite: ``writeFile`` may replace existing files.
        progress: shows a transient status line during long dispatch loops (``-i``/``-t``);
            called with the text, and with ``""`` to clear it. None (the default, and whenever
            output is not a terminal): no progress, DxDispatch's output unchanged.
    """

    dispatch_iterations: int = 1
    dispatch_repeat: int = 1
    milliseconds_to_run: float | None = None
    warmup_samples: int = 1
    timing_verbosity: int = 0
    dispatch_interval: float = 0.0
    bytes_as_chars: bool = False
    max_memory: int | None = None
    allow_outside_paths: bool = False
    overwrite: bool = False
    progress: Callable[[str], None] | None = None


# The progress line appears once a dispatch loop has run this long, and is redrawn at most this
# often (seconds), so short runs never flicker.
PROGRESS_AFTER_S = 0.5
PROGRESS_EVERY_S = 0.2


def _progress_text(
    name: str, done: int, iterations: float, elapsed_ms: float, limit: float | None
) -> str:
    if limit is not None:
        seconds = f"{elapsed_ms / 1000:.1f} of {limit / 1000:.1f} s"
        return f"Dispatch '{name}': {done} iterations, {seconds}"
    return f"Dispatch '{name}': {done} of {int(iterations)} iterations"


def _stats(samples: Sequence[float]) -> tuple[int, float, float, float, float]:
    ordered = sorted(samples)
    return (
        len(ordered),
        statistics.fmean(ordered),
        ordered[0],
        ordered[len(ordered) // 2],
        ordered[-1],
    )


class Executor:
    """Runs a loaded model on one JAX device, writing DxDispatch-style lines to ``out``."""

    def __init__(
        self,
        model: Model,
        device: Any,
        options: RunOptions | None = None,
        out: Callable[[str], None] = print,
    ):
        self.model = model
        self.device = device
        self.options = options or RunOptions()
        self.out = out
        self.state: dict[str, Any] = {}
        self.plans: list[DispatchPlan | None] = []

    def run(self) -> None:
        """Uploads resources, compiles every dispatch, runs the commands in order."""
        for name, resource in self.model.resources.items():
            try:  # with no memory budget (--max-memory 0) nothing was refused before this
                self.state[name] = jax.device_put(resource.initial_buffer(), self.device)
            except (MemoryError, ValueError, RuntimeError) as e:
                raise ModelError(
                    self.model.file, resource.path, cannot_allocate(resource.size_in_bytes, e)
                ) from None
        init_ms: dict[str, float] = {}
        for d in self.model.dispatchables.values():
            init_ms[d.name] = 0.0
            if d.compile_type == COMPILE_OP:
                self.out("Compile Op")
        for command in self.model.commands:
            plan = None
            if isinstance(command, DispatchCommand):
                plan = compile_plan(self.model, command, self.device)
                init_ms[plan.name] += plan.compile_ms
            self.plans.append(plan)
        # OWNED_BY_DML inputs are captured when the dispatchable is initialized.
        self.init_state = dict(self.state)
        if self.options.timing_verbosity >= 1:
            for name, ms in init_ms.items():
                self.out(f"Initialize '{name}': {ms:.4f} ms")
        for command, plan in zip(self.model.commands, self.plans):
            before = dict(self.state)
            try:
                if isinstance(command, DispatchCommand):
                    self._dispatch(command, plan)
                elif isinstance(command, PrintCommand):
                    self._print(command)
                elif isinstance(command, PrintTemporaryCommand):
                    pass  # no DirectML temporary buffer exists to print (see the class)
                else:
                    self._write_file(command)
            except (OSError, ValueError, RuntimeError, MemoryError) as e:
                # Nothing is lost: the resources keep their contents from before this command
                # (a failed dispatch may have updated some of them) and earlier files stay.
                self.state = before
                if isinstance(e, ModelError):
                    raise
                raise ModelError(
                    self.model.file, command.path, f"{type(command).__name__[:-7]} failed: {e}"
                ) from None

    def _buffer(self, name: str) -> np.ndarray:
        return np.asarray(self.state[name])

    def _print(self, command: PrintCommand) -> None:
        resource = self.model.resources[command.resource]
        if resource.data_type is None:
            raise ModelError(
                self.model.file,
                command.path,
                f"cannot print '{command.resource}': its initialValuesDataType is UNKNOWN",
            )
        self.out(
            format_resource(
                command.resource,
                self._buffer(command.resource),
                resource,
                verbose=command.verbose,
                bytes_as_chars=self.options.bytes_as_chars,
            )
        )

    def _write_file(self, command: WriteFileCommand) -> None:
        resource = self.model.resources[command.resource]
        write_file(
            resource,
            self._buffer(command.resource),
            command.target,
            command.dimensions,
            overwrite=self.options.overwrite,
        )
        self.out(f"Resource '{command.resource}' written to '{command.target}'")

    def _dispatch(self, command: DispatchCommand, plan: DispatchPlan) -> None:
        opts = self.options
        cpu: list[float] = []
        dev: list[float] = []
        limit = opts.milliseconds_to_run
        iterations = math.inf if limit is not None else opts.dispatch_iterations
        loop_start = time.perf_counter()
        done = 0
        progress = opts.progress if (limit is not None or iterations > 1) else None
        shown_at = None
        while done < iterations:
            start = time.perf_counter()
            for _ in range(opts.dispatch_repeat):
                args = [
                    self.init_state[n]
                    if n in plan.snapshot_resources and n not in plan.written
                    else self.state[n]
                    for n in plan.resources
                ]
                results = plan.compiled(*args)
                for n, r in zip(plan.written, results):
                    self.state[n] = r
            issued = time.perf_counter()
            # One synchronization per sample: device time covers every repeat.
            jax.block_until_ready([self.state[n] for n in plan.written])
            end = time.perf_counter()
            cpu.append((issued - start) * 1000 / opts.dispatch_repeat)
            dev.append((end - start) * 1000 / opts.dispatch_repeat)
            done += 1
            elapsed_ms = (time.perf_counter() - loop_start) * 1000
            if limit is not None and elapsed_ms >= limit:
                break
            now = time.perf_counter()
            due = shown_at is None or now - shown_at >= PROGRESS_EVERY_S
            if progress is not None and elapsed_ms >= PROGRESS_AFTER_S * 1000 and due:
                progress(_progress_text(plan.name, done, iterations, elapsed_ms, limit))
                shown_at = now
            wait = opts.dispatch_interval - (time.perf_counter() - start) * 1000
            if wait > 0:
                time.sleep(wait / 1000)
        if shown_at is not None:
            progress("")
        self._report(plan, cpu, dev)

    def _report(self, plan: DispatchPlan, cpu: list[float], dev: list[float]) -> None:
        opts = self.options
        cold = min(max(len(cpu), 1) - 1, opts.warmup_samples)
        hot_cpu, hot_dev = cpu[cold:], dev[cold:]
        dev_median = _stats(hot_dev)[3]
        bandwidth = plan.bytes_moved / (dev_median / 1000) / 1e9 if dev_median > 0 else math.inf
        if opts.timing_verbosity == 0:
            self.out(
                f"Dispatch '{plan.name}': {len(cpu)} iterations, "
                f"{_stats(hot_cpu)[3]:.4f} ms median (CPU), {dev_median:.6f} ms median "
                f"(device), {bandwidth:.4g} GB/s"
            )
        else:
            self.out(f"Dispatch '{plan.name}': {len(cpu)} iterations")
            for label, samples in (
                ("CPU Timings (Cold)   ", cpu[:cold]),
                ("Device Timings (Cold)", dev[:cold]),
                ("CPU Timings (Hot)    ", hot_cpu),
                ("Device Timings (Hot) ", hot_dev),
            ):
                if samples:
                    n, avg, lo, med, hi = _stats(samples)
                    self.out(
                        f"{label} : {n} samples, {avg:.4f} ms average, {lo:.4f} ms min, "
                        f"{med:.4f} ms median, {hi:.4f} ms max"
                    )
            self.out(
                f"Bandwidth (Hot) : {plan.bytes_moved} bytes read + written, "
                f"{bandwidth:.4g} GB/s at the median device time"
            )
        if opts.timing_verbosity >= 2:
            self.out("The timings of each iteration: ")
            for i, (c, g) in enumerate(zip(cpu, dev)):
                self.out(f"iteration {i}: {c:.4f} ms (CPU), {g:.4f} ms (device)")


def select_device(spec: str | None) -> Any:
    """``cpu``, ``gpu``, ``tpu`` (the first such device), an index into ``jax.devices()``, or
    None (JAX's default device)."""
    if spec is None:
        return jax.devices()[0]
    if spec.isdigit():
        devices = jax.devices()
        if int(spec) >= len(devices):
            raise ValueError(
                f"device index {spec} is out of range; there are {len(devices)} "
                f"devices: {', '.join(str(d) for d in devices)}"
            )
        return devices[int(spec)]
    if spec.lower() in ("cpu", "gpu", "tpu", "cuda", "rocm"):
        try:
            return jax.devices(spec.lower())[0]
        except RuntimeError as e:
            raise ValueError(f"no {spec} device is available ({e})") from None
    raise ValueError(f"device must be cpu, gpu, tpu or an index, got '{spec}'")


def default_memory_budget(device: Any) -> int:
    """``--max-memory`` by default: 80% of the device's memory limit when JAX reports one
    (GPUs), else half of the machine's physical memory (CPU), else 4 GiB."""
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics raise various errors
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"] * 0.8)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (AttributeError, ValueError, OSError):
        return 4 << 30


def describe_device(device: Any) -> str:
    """The adapter line's description, e.g. ``cpu (cpu:0)``."""
    kind = getattr(device, "device_kind", device.platform)
    return f"{kind} ({device.platform}:{device.id})"


def run_model(
    file: str,
    *,
    device: str | None = None,
    options: RunOptions | None = None,
    feature_level: Any = None,
    out: Callable[[str], None] = print,
    text: str | None = None,
) -> Model:
    """Loads and runs a model file; prints DxDispatch-style output through ``out``.

    Raises:
        ModelError: for any problem in the model or its data.
        ValueError: for a device that does not exist.
    """
    dev = select_device(device)
    options = options or RunOptions()
    budget = options.max_memory
    if budget is None:
        budget = default_memory_budget(dev)
    # 64-bit tensors need JAX's x64 mode; it is switched on for this run only.
    x64 = jax.enable_x64(True) if _model_mentions_64bit(file, text) else contextlib.nullcontext()
    with x64:
        model = load_model(
            file,
            feature_level=feature_level,
            text=text,
            max_memory=budget or None,
            allow_outside_paths=options.allow_outside_paths,
            overwrite=options.overwrite,
        )
        out(f"Running on '{describe_device(dev)}'")
        Executor(model, dev, options, out).run()
    return model


def _model_mentions_64bit(file: str, text: str | None = None) -> bool:
    """Whether the model text names a 64-bit data type, so its tensors need JAX's x64 mode.

    Decided on the text because x64 must be on before operators are compiled; resources
    typed as 64-bit need nothing (they are bytes until a tensor views them). A ``.npy`` file
    a resource reads (``sourcePath``) counts by the type its header declares: an ONNX model's
    INT64 input given as such a file names no type in the text.
    """
    if text is None:
        try:
            with open(file, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return False
    if re.search(r"(INT64|FLOAT64)", text) is not None:
        return True
    folder = os.path.dirname(os.path.abspath(file))
    for source in re.findall(r'"sourcePath"\s*:\s*"([^"]+\.npy)"', text):
        try:
            with open(os.path.join(folder, source), "rb") as f:
                fmt = np.lib.format
                version = fmt.read_magic(f)
                header = (
                    fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
                )
                dtype = header(f)[2]
        except (OSError, ValueError):
            continue  # the load reports an unreadable file
        if dtype.itemsize == 8 and dtype.kind in "iuf":
            return True
    return False
