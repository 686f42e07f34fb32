"""GPU check of the element-wise map kernel (dml_jax.kernels.elementwise_map).

For every operator it is registered for and every narrow data type of the operator's newest
support row: the compiled operator (fast path on CUDA) against the same operator compiled with
``fast_paths=False`` (the lax program), bit for bit (any NaN equals any NaN), on random values,
special values (signed zeros, infinities, NaN, type extremes) and odd sizes. Run on a CUDA machine
from the repository root:

    XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=. python benchmarks/elementwise_check.py
"""

from __future__ import annotations

import sys

import numpy as np

import dml_jax as dml
from dml_jax import catalog, fastpath, registry
from dml_jax.kernels import elementwise_map as M

SPECIAL = {
    "f": [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, 65504.0, -65504.0, 6e-8],
    "i": None,
    "u": None,
}


def values(rng, dtype, n):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        x = (rng.standard_normal(n) * 4).astype(dtype)
        special = np.array(SPECIAL["f"], dtype)
    else:
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, endpoint=True).astype(dtype)
        special = np.array([0, 1, info.max, info.min, 2, 7], dtype)
    x[: len(special)] = special[: min(len(special), n)]
    return x


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        both_nan = np.isnan(a) & np.isnan(b)
        bits_a = a.view(f"u{a.dtype.itemsize}")
        bits_b = b.view(f"u{b.dtype.itemsize}")
        return bool(np.all(both_nan | (bits_a == bits_b)))
    return bool(np.array_equal(a, b))


def main() -> int:
    rng = np.random.default_rng(0)
    failures, checked = [], 0
    for name in M.OPERATORS:
        spec = registry.lookup(name)
        row = spec.support_rows(catalog.example_desc(spec))[-1]
        for dt in sorted(t.name for t in row.inputs):
            if np.dtype(dt.lower()).itemsize > 2:
                continue
            for n in (1, 1000, 4099, 1 << 20):
                try:
                    desc = catalog.retyped(catalog.example_desc(spec), dt, (n,))
                    dml.validate(desc)
                except dml.ValidationError:
                    continue
                if fastpath.select(desc) is None:
                    continue
                xs = [values(rng, t.dtype, n) for _, t in desc.input_slots()]
                try:
                    fast = dml.compile_operator(desc)(*xs)
                    plain = dml.compile_operator(desc, fast_paths=False)(*xs)
                    ok = same(fast, plain)
                except Exception as e:
                    ok, fast = False, f"{type(e).__name__}: {str(e)[:200]}"
                checked += 1
                if not ok:
                    failures.append(f"{name} {dt} n={n}: {fast if isinstance(fast, str) else ''}")
                    break
    print(f"checked {checked} cases, {len(failures)} failures")
    for f in failures:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
