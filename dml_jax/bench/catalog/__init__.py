"""The operator suite's bench catalog: benchmark cases keyed by operator type.

``ops/`` holds lowering only; what the operator suite times for an operator lives here, one
module per ``ops`` module. A case is a descriptor at the run's shape and data type (derived from
the operator's registered example where the example says enough: the element-wise and activation
rows), with its hand-written jnp and PyTorch equivalents. Whether a GPU fast path covers a case is
not written here: the suite asks ``dml_jax.fastpath`` at bench time and times the lax lowering
beside it where one applies. An operator needs no case (three files make an operator; a case is
an optional fourth), and ``tests/test_bench.py`` checks that every entry names a registered
operator and gives cases.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BenchCase:
    """A benchmark case of one operator.

    Attributes:
        label: the case name in tables (``"TILE 1,1,2,2"``).
        desc: the operator description to time; its inputs are random arrays of their Sizes.
        jnp: optional ``fn(*arrays)``, the obvious hand-written jax.numpy equivalent.
        torch: optional ``fn(torch, *tensors)``, the PyTorch eager equivalent.
        notes: a remark for the results table.
        buffers: time buffer mode (``buffer_function``): inputs are 1-D buffers of each desc's
            addressed elements, so a stride-0 desc is read as a small broadcast buffer; ``jnp``
            and ``torch`` then take those buffers too.
        in_place: time the output written over the first input's buffer (JAX buffer donation,
            the XLA program aliasing output and input); each call consumes the previous result.
    """

    label: str
    desc: Any
    jnp: Callable | None = None
    torch: Callable | None = None
    notes: str = ""
    buffers: bool = False
    in_place: bool = False


# operator type -> cases(shape, dtype, full) -> list[BenchCase], for a 4-D shape (N, C, H, W;
# C % 4 == 0, H and W even), a NumPy dtype name, and whether the full (float32) suite runs.
CASES: dict[str, Callable[[tuple, str, bool], list[BenchCase]]] = {}


def register_cases(operator_type: str | type, cases: Callable) -> None:
    """Registers the cases of one operator type (a ``DML_OPERATOR_*`` name or its class)."""
    name = getattr(operator_type, "operator_type", operator_type)
    if name in CASES:
        raise ValueError(f"bench cases of {name} are already registered")
    CASES[name] = cases


_MODULES = (
    "rows",
    "clip",
    "depth_space",
    "elementwise",
    "fold",
    "indexing",
    "movement",
    "normalization",
    "pooling",
    "quantize",
    "random_generator",
    "reduce",
    "resample",
    "roi",
    "scan_generate",
    "softmax",
    "split_join",
    "tile",
    "topk",
)
_loaded = False


def _load() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for name in _MODULES:
            importlib.import_module(f"{__name__}.{name}")


def cases(spec: Any, shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
    """The bench cases of the registered operator ``spec`` (none where it has no entry)."""
    _load()
    make = CASES.get(spec.name)
    return [] if make is None else list(make(shape, dtype, full))


def catalog() -> dict[str, Callable]:
    """Every entry, by operator type."""
    _load()
    return dict(CASES)
