"""The case recorder of the subprocess test workers (``_distributed_worker.py``,
``_session_mesh_worker.py``): each case is a function returning ``(ok, detail)``; an exception
fails that case with its traceback instead of ending the worker."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable


def recorder(results: dict) -> Callable:
    """``record(case_id, fn)``: runs ``fn`` and stores ``{"ok", "detail"}`` under ``case_id``."""

    def record(case_id: str, fn: Callable) -> None:
        started = time.perf_counter()
        try:
            ok, detail = fn()
        except Exception:  # noqa: BLE001 - a failing case reports its traceback
            ok, detail = False, traceback.format_exc()[-3000:]
        seconds = round(time.perf_counter() - started, 2)
        results[case_id] = {"ok": bool(ok), "detail": detail, "seconds": seconds}

    return record
