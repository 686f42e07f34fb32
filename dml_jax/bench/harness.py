"""What every suite shares: the one timer, the environment, and the report a run writes.

A suite (``dml_jax.bench.suites.<name>``) adds rows to a ``Run``; the run rewrites its JSON file
after every row, so a run cut short (a time limit, a crash) keeps what it measured. The report
holds the suite's name, the device, jax's version, the date, the commit, and the rows; a part a
suite could not run (no PyTorch, one device) is named under ``skipped`` with the reason.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The repository root when dml_jax runs from a checkout (examples/ and git live there).
ROOT = Path(__file__).resolve().parent.parent.parent


@dataclass
class Timer:
    """The one timing function of every suite: the median of ``samples`` samples, each sample
    many dispatches followed by one sync (a sync per call would add the host's latency to every
    call). The dispatches per sample fill about ``sample_s`` seconds, between 3 and
    ``max_iters``; the first call (trace, compile, allocate) is never timed."""

    sample_s: float = 0.05
    samples: int = 5
    max_iters: int = 1000

    def run(self, call: Callable[[], Any], sync: Callable[[Any], None]) -> float:
        """Seconds per call of ``call()``; ``sync(result)`` waits for the device."""
        sync(call())  # warm: compile, allocate
        t = time.perf_counter()
        sync(call())
        one = max(time.perf_counter() - t, 1e-7)
        iters = int(min(self.max_iters, max(3, self.sample_s / one)))
        times = []
        for _ in range(self.samples):
            t = time.perf_counter()
            out = None
            for _ in range(iters):
                out = call()
            sync(out)
            times.append((time.perf_counter() - t) / iters)
        return statistics.median(times)


def cold_time(call: Callable[[], Any], sync: Callable[[Any], None]) -> tuple[float, Any]:
    """(seconds, result) of the first call: trace, compile and run (PyTorch: the first run)."""
    t = time.perf_counter()
    out = call()
    sync(out)
    return time.perf_counter() - t, out


# torch.compile's on-disk caches: Inductor's (its FX graphs, its autotuning) and Triton's
# compiled kernels, which Inductor keeps under its own directory unless TRITON_CACHE_DIR says.
TORCH_CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@contextlib.contextmanager
def cold_torch_caches() -> Iterator[str]:
    """``torch.compile``'s on-disk caches in a fresh directory for the block, removed after.

    Its caches are on by default and outlive the process: a first call that finds an earlier
    process's graphs and kernels on disk is not a cold compile (ConvNeXt-T, float16, batch 64
    on an H100, 2026-11-27: 15.0 s, then 2.3 s in a second process, 12.8 s with fresh
    directories; MobileNetV3-Large 20.8, 6.1, 21.0 s), while dml_jax's first call reads no
    on-disk cache. The variables are read when Inductor compiles, so setting them here is
    enough; their earlier values come back after the block."""
    saved = {k: os.environ.get(k) for k in TORCH_CACHE_VARIABLES}
    with tempfile.TemporaryDirectory(prefix="torch_cold_") as tmp:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tmp
        os.environ["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
        try:
            yield tmp
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def jax_sync(out: Any) -> None:
    import jax

    jax.block_until_ready(out)


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=ROOT, check=False, capture_output=True, text=True, timeout=10
    )


def commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes), or None outside git."""
    try:
        head = _git("rev-parse", "--short=12", "HEAD")
        if head.returncode:
            return None
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict:
    """Device, versions and date of this process (the head of every report)."""
    import jax

    devices = jax.devices()
    env = dict(
        device=getattr(devices[0], "device_kind", str(devices[0])),
        device_count=len(devices),
        backend=jax.default_backend(),
        jax=jax.__version__,
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        commit=commit(),
        python=platform.python_version(),
        machine=platform.machine(),
    )
    try:
        import torch

        env["torch"] = torch.__version__
    except ImportError:
        env["torch"] = None
    return env


class Run:
    """One suite's run: its options, timer, budget and report (rewritten after every row)."""

    def __init__(self, suite: str, args: Any, path: Path | None, log: Callable = print):
        self.suite = suite
        self.args = args
        self.quick = bool(args.quick)
        self.path = path
        self.log = log
        self.started = time.perf_counter()
        sample_s = args.sample_s if args.sample_s is not None else (0.005 if self.quick else 0.05)
        self.timer = Timer(sample_s=sample_s, samples=args.samples)
        self.rows: list[dict] = []
        self.report: dict = dict(
            suite=suite,
            **environment(),
            quick=self.quick,
            argv=sys.argv[1:],
            rows=self.rows,
            skipped=[],
        )
        self._torch: Any = False  # not looked up yet

    # -- PyTorch, when it is installed and sees a CUDA device ------------------------------

    @property
    def torch(self) -> Any:
        """PyTorch on CUDA, or None (the reason is recorded once under ``skipped``)."""
        if self._torch is False:
            self._torch = None
            if getattr(self.args, "no_torch", False):
                self.skip("PyTorch", "--no-torch")
            elif self.report["backend"] != "gpu":
                self.skip("PyTorch", f"JAX runs on {self.report['backend']}, not a GPU")
            else:
                try:
                    import torch
                except ImportError as e:
                    self.skip("PyTorch", f"not importable: {e}")
                else:
                    if torch.cuda.is_available():
                        self._torch = torch
                    else:
                        self.skip("PyTorch", "sees no CUDA device")
        return self._torch

    def torch_sync(self, _out: Any = None) -> None:
        self._torch.cuda.synchronize()

    # -- the report ------------------------------------------------------------------------

    def skip(self, part: str, reason: str) -> None:
        """Records a part of the suite that did not run, and why."""
        entry = {"part": part, "reason": reason}
        if entry not in self.report["skipped"]:
            self.report["skipped"].append(entry)
            self.log(f"  skipped {part}: {reason}")
            self.write()

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def over_budget(self) -> bool:
        """Past ``--budget-s``: start no further case (the rest is recorded as skipped)."""
        budget = getattr(self.args, "budget_s", None)
        return budget is not None and self.elapsed() > budget

    def add(self, row: dict) -> dict:
        self.rows.append(row)
        self.log("  " + json.dumps({k: v for k, v in row.items() if k != "error_trace"}))
        self.write()
        return row

    def write(self) -> None:
        if self.path is None:
            return
        self.report["elapsed_s"] = round(self.elapsed(), 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.report, indent=1, default=_json_default) + "\n")
        os.replace(tmp, self.path)


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # NumPy scalars
        return value.item()
    return str(value)


def error_text(e: BaseException, limit: int = 300) -> str:
    """One line for a row's ``error``: the exception's type and first line."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:limit]


def examples_module(name: str) -> Any:
    """A module of the repository's ``examples/`` folder (networks, train_cnn), which the
    networks and training suites share with the examples; only in a checkout."""
    folder = str(ROOT / "examples")
    if not (ROOT / "examples" / f"{name}.py").exists():
        raise ImportError(f"examples/{name}.py not found under {ROOT} (run from a checkout)")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    return __import__(name)


# The suites, in the order of the results page.
SUITES = (
    "operators",
    "gemm_conv",
    "quantized",
    "attention_lstm",
    "networks",
    "onnx_models",
    "training",
    "scaling",
)


def suite_module(name: str):
    """The module of suite ``name`` (``add_arguments``, ``run``, ``table``)."""
    return importlib.import_module(f"dml_jax.bench.suites.{name}")
