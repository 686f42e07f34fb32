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
        iters = self.iterations(call, sync)
        times = []
        for _ in range(self.samples):
            t = time.perf_counter()
            out = None
            for _ in range(iters):
                out = call()
            sync(out)
            times.append((time.perf_counter() - t) / iters)
        return statistics.median(times)

    def iterations(self, call: Callable[[], Any], sync: Callable[[Any], None]) -> int:
        """Dispatches per sample for ``call``: warmed (compile, allocate), then one timed call
        says how many fill ``sample_s`` (between 3 and ``max_iters``)."""
        sync(call())
        t = time.perf_counter()
        sync(call())
        one = max(time.perf_counter() - t, 1e-7)
        return int(min(self.max_iters, max(3, self.sample_s / one)))

    def alternate(
        self, calls: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]], samples: int
    ) -> dict[str, list[float]]:
        """Seconds per call of each of ``calls`` (name -> (call, sync)), ``samples`` samples
        each, taken in turn: sample k of every configuration before sample k + 1 of any, the
        order rotated each round, so that a drift of the card or the host (clocks, another
        process) falls on all of them alike. Each sample is many dispatches and one sync
        (throughput). Returns each configuration's samples in the order taken."""
        iters = {name: self.iterations(call, sync) for name, (call, sync) in calls.items()}
        names = list(calls)
        out: dict[str, list[float]] = {name: [] for name in names}
        for k in range(samples):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                call, sync = calls[name]
                t = time.perf_counter()
                result = None
                for _ in range(iters[name]):
                    result = call()
                sync(result)
                out[name].append((time.perf_counter() - t) / iters[name])
        return out

    def latency(
        self, calls: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]], samples: int
    ) -> dict[str, list[float]]:
        """Seconds of each single call of ``calls`` synced on its own (dispatch and device time
        added, as a request sees them), ``samples`` calls each, taken in turn as in
        ``alternate``."""
        names = list(calls)
        for call, sync in calls.values():
            sync(call())
        out: dict[str, list[float]] = {name: [] for name in names}
        for k in range(samples):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                call, sync = calls[name]
                t = time.perf_counter()
                sync(call())
                out[name].append(time.perf_counter() - t)
        return out


def quantile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (linear between order statistics)."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summary(seconds: list[float]) -> dict:
    """A time's samples as milliseconds: median, p10, p90 and the sample count."""
    ms = [s * 1e3 for s in seconds]
    return dict(
        median=statistics.median(ms), p10=quantile(ms, 0.1), p90=quantile(ms, 0.9), n=len(ms)
    )


def ratio(other: list[float], ours: list[float]) -> dict:
    """``other`` / ``ours`` from paired samples (taken in turn by ``Timer.alternate``): the
    median of the per-round ratios, their p10 and p90, and ``crosses_1`` when that spread
    holds 1.0 (the run cannot tell which is faster)."""
    pairs = [a / b for a, b in zip(other, ours)]
    lo, hi = quantile(pairs, 0.1), quantile(pairs, 0.9)
    return dict(median=statistics.median(pairs), p10=lo, p90=hi, crosses_1=lo <= 1.0 <= hi)


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
    """The checkout's commit, its full hash (``+dirty`` with uncommitted changes to tracked
    files), or None outside git."""
    try:
        head = _git("rev-parse", "HEAD")
        if head.returncode:
            return None
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


# What a measurement depends on: the package and its dependencies' declaration. Runs whose
# files agree here measured the same code (``code_tree``), whatever else changed between them.
CODE_PATHS = ("dml_jax", "pyproject.toml")


def code_tree() -> str | None:
    """The git tree hash of ``CODE_PATHS`` alone, as they are (``tree`` of those paths): parts
    of one run (``--resume``) must agree on it, so documentation and tests committed between
    two sittings do not end a run whose code is the same."""
    return tree(CODE_PATHS)


def tree(paths: tuple[str, ...] = (".",)) -> str | None:
    """The git tree hash of the checkout's files as they are (tracked and untracked, less what
    git ignores; ``paths`` only, where given), whatever HEAD says: the commit a report ran at
    is the one with this tree (``commit_of_tree``), even from a copy of a working tree whose
    ``.git`` is older than its files (a remote machine's copy). None outside git."""
    index = None
    try:
        if _git("rev-parse", "--git-dir").returncode:
            return None
        fd, index = tempfile.mkstemp(prefix="dml_jax_tree_")
        os.close(fd)
        os.remove(index)  # git makes a fresh index there
        env = dict(os.environ, GIT_INDEX_FILE=index)
        for args in (("add", "-A", "--", *paths), ("write-tree",)):
            done = subprocess.run(["git", *args], cwd=ROOT, env=env, check=False,
                                  capture_output=True, text=True, timeout=60)  # fmt: skip
            if done.returncode:
                return None
        return done.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None
    finally:
        if index and os.path.exists(index):
            os.remove(index)


def commit_of_tree(tree_hash: str | None) -> str | None:
    """The newest commit of this checkout whose tree is ``tree_hash``, or None."""
    if not tree_hash:
        return None
    try:
        done = _git("log", "--all", "--format=%H %T", "-n", "2000")
    except (OSError, subprocess.SubprocessError):
        return None
    for line in done.stdout.splitlines():
        c, _, t = line.partition(" ")
        if t == tree_hash:
            return c
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
        tree=tree(),
        code_tree=code_tree(),
        python=platform.python_version(),
        machine=platform.machine(),
    )
    try:
        import torch

        env["torch"] = torch.__version__
    except ImportError:
        env["torch"] = None
    env["versions"] = versions()
    env["driver"] = gpu_driver() if env["backend"] == "gpu" else None
    return env


# The packages whose versions a report records (those importable in the run's process).
PACKAGES = (
    "jax", "jaxlib", "numpy", "torch", "torchvision", "timm", "transformers", "onnx",
    "onnxruntime", "onnxscript",
)  # fmt: skip


def versions() -> dict[str, str]:
    """The installed version of each of ``PACKAGES`` (from the package metadata: nothing is
    imported), leaving out those not installed."""
    from importlib import metadata

    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def gpu_driver() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None where it cannot be read."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            check=False, capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else None


# The fields every report's head holds (``environment`` and ``Run``): a test checks them.
PROVENANCE = (
    "suite", "device", "device_count", "backend", "jax", "date", "commit", "tree", "code_tree",
    "python", "machine",
    "torch", "versions", "driver", "argv", "quick",
)  # fmt: skip


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
        self.started_date = datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"
        )
        self.report: dict = dict(
            suite=suite,
            **environment(),
            quick=self.quick,
            argv=sys.argv[1:],
            rows=self.rows,
            skipped=[],
        )
        self._torch: Any = False  # not looked up yet
        self._tree, self._commit = self.report["tree"], self.report["commit"]  # this part's
        if getattr(args, "resume", False):
            self._resume()

    def _resume(self) -> None:
        """``--resume``: the rows of this suite's report at ``path`` carried over when it was
        written from the same code (its ``code_tree``: the package's files; reports without
        one, the whole ``tree``), on this device, with the same options but ``--only``; a
        further part of the same run, recorded under ``parts`` with each part's own ``tree``.
        Otherwise the run starts afresh (and says so)."""
        if self.path is None or not self.path.exists():
            return
        old = json.loads(self.path.read_text())
        key = "code_tree" if old.get("code_tree") is not None else "tree"
        same = (
            old.get("suite") == self.suite
            and old.get(key) is not None
            and old.get(key) == self.report[key]
            and old.get("device") == self.report["device"]
            and old.get("driver") == self.report["driver"]
            and old.get("versions") == self.report["versions"]
            and _options(old.get("argv", [])) == _options(self.report["argv"])
        )
        if not same:
            self.log("  --resume: the report on disk is of another commit, device or options;"
                     " starting afresh")  # fmt: skip
            return
        self.rows.extend(old["rows"])
        self.report["skipped"] = [
            s for s in old.get("skipped", []) if "--budget-s" not in s["reason"]
        ]
        self.report["parts"] = old.get("parts") or [
            {"argv": old["argv"], "date": old["date"], "elapsed_s": old.get("elapsed_s"),
             "tree": old.get("tree"), "commit": old.get("commit")}
        ]  # fmt: skip
        self.report["date"] = old["date"]
        # the report names its first part's files (each part's are under ``parts``)
        self.report["tree"], self.report["commit"] = old.get("tree"), old.get("commit")
        self._part = len(self.report["parts"])

    def done(self, **fields: Any) -> bool:
        """Whether a row holding all of ``fields`` (``model="bert"``, or ``model=..., dtype=...,
        batch=...``) is already in the report (``--resume``)."""
        return any(all(r.get(k) == v for k, v in fields.items()) for r in self.rows)

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
        if "parts" in self.report:
            part = {"argv": sys.argv[1:], "date": self.started_date,
                    "elapsed_s": self.report["elapsed_s"], "tree": self._tree,
                    "commit": self._commit}  # fmt: skip
            parts = self.report["parts"]
            parts[self._part :] = [part]
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.report, indent=1, default=_json_default) + "\n")
        os.replace(tmp, self.path)


# Words of a command line that part of a run may change: which cases it takes (``--only``),
# how long it may go on (``--budget-s``) and where its report is (``--out``) measure nothing.
PART_OPTIONS = ("--only", "--resume", "--budget-s", "--out")


def _options(argv: list[str]) -> list[str]:
    """A command line without ``PART_OPTIONS``' words: the options every part of a resumed run
    must share."""
    out, skipping = [], False
    for word in argv:
        if word.startswith("--"):
            skipping = word.split("=", 1)[0] in PART_OPTIONS
            if skipping:
                continue
        elif skipping:
            continue
        out.append(word)
    return out


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
    "quantized_models",
    "attention_lstm",
    "networks",
    "onnx_models",
    "detection",
    "decode",
    "training",
    "scaling",
)


def suite_module(name: str):
    """The module of suite ``name`` (``add_arguments``, ``run``, ``table``)."""
    return importlib.import_module(f"dml_jax.bench.suites.{name}")
