"""Timing shared by the benchmark sweeps: the best of 3 means of ``reps`` calls, one sync per
``reps`` calls (a per-call sync would add the host's latency to every call)."""

from __future__ import annotations

import time

import jax


def _best(call, sync, reps: int) -> float:
    sync(call())  # compiled, warm
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        out = None
        for _ in range(reps):
            out = call()
        sync(out)
        best = min(best, (time.perf_counter() - t) / reps)
    return best


def timeit(fn, *args, reps: int = 20) -> float:
    """Seconds per call of the jax function ``fn(*args)``."""
    return _best(lambda: fn(*args), jax.block_until_ready, reps)


def torch_best(fn, *args, reps: int = 20) -> float:
    """Seconds per call of the PyTorch function ``fn(*args)`` on CUDA."""
    import torch

    return _best(lambda: fn(*args), lambda _: torch.cuda.synchronize(), reps)


def torch_copy_seconds(shape, dtype) -> float:
    """PyTorch's device copy of the same tensor (the faster roofline for 2-byte types), or inf."""
    try:
        import torch
    except ImportError:
        return float("inf")
    src = torch.empty(shape, dtype=getattr(torch, dtype), device="cuda")
    dst = torch.empty_like(src)
    best = torch_best(dst.copy_, src)
    del src, dst
    torch.cuda.empty_cache()
    return best


def record(rows: list, row: dict, out: str | None = None) -> None:
    """Appends ``row``, prints it as one JSON line and rewrites ``out`` (when given) with every
    row so far, so that a run cut short keeps what it measured."""
    import json

    rows.append(row)
    print(json.dumps(row), flush=True)
    if out:
        with open(out, "w") as f:
            json.dump(rows, f, indent=1)
