"""The GPU kernels of a ``jax.profiler`` trace, for the experiments that say where a program's
time goes (``decode_step_gpu.py``, ``tp_profile_gpu.py``, ``two_row_forms_gpu.py``; they import
it from this folder, their own).

``record(fn, calls)`` traces ``calls`` calls of ``fn`` (a function of no arguments returning
arrays) and returns the trace's folder; ``kernels(folder, per)`` reads one GPU's kernel events:
their count, summed time and span (first kernel's start to last kernel's end) per ``per``
units (calls, tokens), the busy fraction, and the largest kernels by summed time.
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Callable
from typing import Any


def record(fn: Callable[[], Any], calls: int) -> str:
    """The folder of a trace of ``calls`` calls of ``fn``, synchronized at the end."""
    import jax

    folder = tempfile.mkdtemp()
    jax.profiler.start_trace(folder)
    for _ in range(calls):
        out = fn()
    jax.block_until_ready(out)
    jax.profiler.stop_trace()
    return folder


def planes(folder: str) -> list[str]:
    """The names of the trace's GPU planes, in device order."""
    return sorted(p.name for p in _data(folder).planes if p.name.startswith("/device:GPU"))


def kernels(folder: str, per: float, plane: str = "/device:GPU:0", top: int = 40) -> dict:
    """GPU ``plane``'s kernels in the trace at ``folder``, per ``per`` units: ``kernels``,
    ``kernel_us`` and ``span_us`` a unit, ``busy`` (summed time over span) and ``top``: (name,
    kernels a unit, microseconds a unit) of the ``top`` largest."""
    events = []
    for p in _data(folder).planes:
        if p.name == plane:
            for line in p.lines:
                if line.name.startswith("Stream"):
                    events += [(e.start_ns, e.duration_ns, e.name) for e in line.events]
    if not events:
        return {"error": f"no stream events of {plane} in the trace"}
    events.sort()
    busy = sum(d for _, d, _ in events)
    span = events[-1][0] + events[-1][1] - events[0][0]
    by_name: dict[str, list] = {}
    for _, d, n in events:
        by_name.setdefault(n[:80], []).append(d)
    largest = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "kernels": len(events) / per,
        "kernel_us": busy / per / 1e3,
        "span_us": span / per / 1e3,
        "busy": busy / span,
        "top": [(n, len(d) / per, round(sum(d) / per / 1e3, 2)) for n, d in largest],
    }


def _data(folder: str) -> Any:
    from jax.profiler import ProfileData

    path = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)[0]
    return ProfileData.from_file(path)
