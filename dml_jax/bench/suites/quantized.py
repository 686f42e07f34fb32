"""The quantized suite: integer matrix products against the float16 GEMM of the same shape, side
by side in one run.

For each square size S (M = K = N = S) it times, in TOPS (integer) or TFLOP/s (float16),
2 * S^3 operations per call:

- dml_jax's MATRIX_MULTIPLY_INTEGER on INT8 x INT8 without zero points, with one zero point
  per tensor, and on UINT8 x INT8 with zero points per row of A and per column of B (the
  shifted-operand path); MATRIX_MULTIPLY_INTEGER_TO_FLOAT INT8 -> FLOAT16 (scales per tensor of
  A and per column of B); QUANTIZED_LINEAR_MATRIX_MULTIPLY UINT8 x INT8 -> UINT8 with zero
  points (the requantizing epilogue included);
- dml_jax's GEMM in FLOAT16;
- jax: ``lax.dot_general`` INT8 x INT8 -> INT32 (XLA's int8 dot), float16 ``jnp.dot``, and, at
  sizes up to ``--int16-up-to``, INT16 x INT16 -> INT32 (the operands the integer lowering used
  to widen to, for the record);
- PyTorch eager, when it sees a GPU: ``torch._int_mm`` (INT8 -> INT32) and float16 ``matmul``.

A check first compares each dml_jax integer operator with a NumPy int64 reference at a small size
on the same device (exact), and the int8 product without zero points with XLA's int8 dot at every
timed size (bit for bit): ``checks``. ``kernels`` names the custom calls and fusion kinds of each
compiled program (e.g. a cuBLAS gemm), so a slow row can be told from a fallback. ``summary``:
per size, each integer case's rate over dml_jax's float16 GEMM and over the best float16 rate.
Default sizes 8192 and 4096; ``--quick``: 64 (no int16 product).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import dml_jax as dml

from ..harness import Run, Timer, error_text

T = dml.TensorDesc
_RANGES = {"INT8": (-128, 128), "UINT8": (0, 256)}


def _ints(key, shape, type_name: str):
    lo, hi = _RANGES[type_name]
    return jax.random.randint(key, shape, lo, hi, jnp.int32).astype(type_name.lower())


def _floats(key, shape, dtype="float16", scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def dml_cases(s: int) -> list[tuple[str, str, object, list]]:
    """(label, kind, descriptor, inputs) of the dml_jax operators at size ``s``."""
    key = jax.random.key(s)
    k = iter(jax.random.split(key, 16))
    a8, b8 = _ints(next(k), (s, s), "INT8"), _ints(next(k), (s, s), "INT8")
    au = _ints(next(k), (s, s), "UINT8")
    one = T("INT8", (1, 1))
    cases = [
        (
            "MATRIX_MULTIPLY_INTEGER int8 x int8",
            "int8",
            dml.MatrixMultiplyIntegerOperatorDesc(
                T("INT8", (s, s)), None, T("INT8", (s, s)), None, T("INT32", (s, s))
            ),
            [a8, b8],
        ),
        (
            "MATRIX_MULTIPLY_INTEGER int8 x int8, zero points per tensor",
            "int8",
            dml.MatrixMultiplyIntegerOperatorDesc(
                T("INT8", (s, s)), one, T("INT8", (s, s)), one, T("INT32", (s, s))
            ),
            [a8, jnp.full((1, 1), 3, jnp.int8), b8, jnp.full((1, 1), -5, jnp.int8)],
        ),
        (
            "MATRIX_MULTIPLY_INTEGER uint8 x int8, zero points per row / column",
            "int8",
            dml.MatrixMultiplyIntegerOperatorDesc(
                T("UINT8", (s, s)),
                T("UINT8", (s, 1)),
                T("INT8", (s, s)),
                T("INT8", (1, s)),
                T("INT32", (s, s)),
            ),
            [au, _ints(next(k), (s, 1), "UINT8"), b8, _ints(next(k), (1, s), "INT8")],
        ),
        (
            "MATRIX_MULTIPLY_INTEGER_TO_FLOAT int8 -> float16",
            "int8",
            dml.MatrixMultiplyIntegerToFloatOperatorDesc(
                T("INT8", (s, s)),
                T("FLOAT16", (1, 1)),
                None,
                T("INT8", (s, s)),
                T("FLOAT16", (1, s)),
                None,
                None,
                T("FLOAT16", (s, s)),
            ),
            [
                a8,
                jnp.full((1, 1), 0.01, jnp.float16),
                b8,
                jnp.abs(_floats(next(k), (1, s), scale=0.001)),
            ],
        ),
        (
            "QUANTIZED_LINEAR_MATRIX_MULTIPLY uint8 x int8 -> uint8",
            "int8",
            dml.QuantizedLinearMatrixMultiplyOperatorDesc(
                T("UINT8", (s, s)),
                T("FLOAT32", (1, 1)),
                T("UINT8", (1, 1)),
                T("INT8", (s, s)),
                T("FLOAT32", (1, 1)),
                T("INT8", (1, 1)),
                T("FLOAT32", (1, 1)),
                T("UINT8", (1, 1)),
                T("UINT8", (s, s)),
            ),
            [
                au,
                jnp.full((1, 1), 0.02, jnp.float32),
                jnp.full((1, 1), 128, jnp.uint8),
                b8,
                jnp.full((1, 1), 0.01, jnp.float32),
                jnp.zeros((1, 1), jnp.int8),
                jnp.full((1, 1), 0.05 * s**0.5, jnp.float32),
                jnp.full((1, 1), 128, jnp.uint8),
            ],
        ),
        (
            "GEMM float16",
            "float16",
            dml.GemmOperatorDesc(
                T("FLOAT16", (s, s)), T("FLOAT16", (s, s)), None, T("FLOAT16", (s, s))
            ),
            [_floats(next(k), (s, s)), _floats(next(k), (s, s))],
        ),
    ]
    return cases


def _int8_dot(a, b):
    return lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.int32)


def _int16_dot(a, b):
    return lax.dot_general(
        a.astype(jnp.int16),
        b.astype(jnp.int16),
        (((1,), (0,)), ((), ())),
        preferred_element_type=jnp.int32,
    )


def kernels(compiled_text: str) -> list[str]:
    """The custom-call targets and non-loop fusion kinds of a compiled XLA program."""
    found = re.findall(r'custom_call_target="([^"]+)"', compiled_text)
    found += [f"fusion:{k}" for k in re.findall(r'"kind":"(__[^"]+)"', compiled_text)]
    return sorted(set(found))


def _reference_matmul(desc, arrays) -> np.ndarray:
    """MATRIX_MULTIPLY_INTEGER in NumPy: int64 sums of the zero-point differences, wrapped."""
    names = [f.name for f in desc.declared("input") if getattr(desc, f.name) is not None]
    x = {n: np.asarray(a).astype(np.int64) for n, a in zip(names, arrays)}
    a = x["a_tensor"] - x.get("a_zero_point_tensor", 0)
    b = x["b_tensor"] - x.get("b_zero_point_tensor", 0)
    return (a @ b).astype(np.int32)


def check(sizes: list[int], check_size: int, log=print) -> list[dict]:
    rows = []
    for label, _, desc, xs in dml_cases(check_size):
        if desc.operator_type != "DML_OPERATOR_MATRIX_MULTIPLY_INTEGER":
            continue
        try:
            got = np.asarray(dml.compile_operator(desc)(*xs))
            ok = bool(np.array_equal(got, _reference_matmul(desc, xs)))
            rows.append(dict(check=f"{label} == NumPy int64", size=check_size, exact=ok))
        except Exception as e:
            rows.append(dict(check=label, size=check_size, error=f"{type(e).__name__}: {e}"))
        log(f"  check {rows[-1]}")
    for s in sizes:
        try:
            label, _, desc, xs = dml_cases(s)[0]
            same = jnp.array_equal(dml.compile_operator(desc)(*xs), jax.jit(_int8_dot)(*xs))
            rows.append(dict(check=f"{label} == XLA int8 dot", size=s, exact=bool(same)))
        except Exception as e:
            rows.append(dict(check="int8 == XLA int8 dot", size=s, error=f"{e}"[:300]))
        log(f"  check {rows[-1]}")
    return rows


def _time(run: Run, sizes: list[int], int16_up_to: int) -> None:
    timer = run.timer

    def record(size, label, kind, impl, call: Callable, sync, program=None, clock=timer):
        ops = 2 * size**3
        row = dict(size=size, case=label, kind=kind, impl=impl)
        try:
            seconds = clock.run(call, sync)
            row.update(seconds=seconds, tera_ops=ops / seconds / 1e12)
            if program is not None and not run.quick:  # the compiled program's kernels
                fn, args = program
                row["kernels"] = kernels(jax.jit(fn).lower(*args).compile().as_text())
        except Exception as e:  # recorded, the run goes on
            row["error"] = error_text(e, 400)
        run.add(row)

    sync = jax.block_until_ready
    torch = run.torch
    for s in sizes:
        if run.over_budget():
            run.skip(f"size {s} on", f"--budget-s {run.args.budget_s}")
            break
        for label, kind, desc, xs in dml_cases(s):
            try:
                op = dml.compile_operator(desc)
            except Exception as e:
                run.add(dict(size=s, case=label, kind=kind, impl="dml", error=error_text(e, 400)))
                continue
            record(s, label, kind, "dml", lambda op=op, xs=xs: op(*xs), sync, (op.fn, xs))
        key = jax.random.key(s + 1)
        a8, b8 = _ints(key, (s, s), "INT8"), _ints(jax.random.fold_in(key, 1), (s, s), "INT8")
        f16 = [_floats(jax.random.fold_in(key, i), (s, s)) for i in (2, 3)]
        int8_dot, f16_dot = jax.jit(_int8_dot), jax.jit(jnp.dot)
        record(
            s,
            "lax.dot_general int8 x int8 -> int32",
            "int8",
            "jax",
            lambda: int8_dot(a8, b8),
            sync,
            (_int8_dot, [a8, b8]),
        )
        record(s, "jnp.dot float16", "float16", "jax", lambda: f16_dot(*f16), sync, (jnp.dot, f16))
        if s <= int16_up_to:
            int16_dot = jax.jit(_int16_dot)
            # possibly a slow fallback: a few calls, not a timed sample of 50 ms
            record(
                s,
                "int16 x int16 -> int32 (operands widened)",
                "int8",
                "jax",
                lambda: int16_dot(a8, b8),
                sync,
                (_int16_dot, [a8, b8]),
                Timer(sample_s=0.0, samples=1),
            )
        del a8, b8, f16
        if torch is not None:
            dev = torch.device("cuda")
            ta, tb = (torch.randint(-128, 128, (s, s), dtype=torch.int8, device=dev) for _ in "ab")
            th = [torch.randn((s, s), dtype=torch.float16, device=dev) for _ in "ab"]

            def tsync(_):
                torch.cuda.synchronize()

            record(
                s,
                "torch._int_mm int8 -> int32",
                "int8",
                "torch",
                lambda: torch._int_mm(ta, tb),
                tsync,
            )
            record(s, "torch.matmul float16", "float16", "torch", lambda: th[0] @ th[1], tsync)
            del ta, tb, th
            torch.cuda.empty_cache()


def summarize(rows: list[dict]) -> list[dict]:
    """Per size: dml_jax's int8 rates over its float16 GEMM and over the best float16 rate."""
    out = []
    for s in sorted({r["size"] for r in rows}):
        at = [r for r in rows if r["size"] == s and "tera_ops" in r]
        f16 = [r for r in at if r["kind"] == "float16"]
        gemm = next((r["tera_ops"] for r in f16 if r["impl"] == "dml"), None)
        best = max((r["tera_ops"] for r in f16), default=None)
        for r in at:
            if r["impl"] == "dml" and r["kind"] == "int8":
                out.append(
                    dict(
                        size=s,
                        case=r["case"],
                        tops=r["tera_ops"],
                        over_dml_float16_gemm=r["tera_ops"] / gemm if gemm else None,
                        over_best_float16=r["tera_ops"] / best if best else None,
                    )
                )
    return out


def add_arguments(p: Any) -> None:
    p.add_argument("--sizes", default="8192,4096", help="square sizes (default %(default)s)")
    p.add_argument("--check-size", type=int, default=512, help="size of the exact checks")
    p.add_argument(
        "--int16-up-to", type=int, default=4096, help="largest size of the int16 product"
    )


def run(run: Run) -> int:
    args = run.args
    sizes = [64] if run.quick else [int(v) for v in args.sizes.split(",")]
    check_size = min(args.check_size, 32) if run.quick else args.check_size
    run.report["checks"] = check(sizes, check_size, run.log)
    _time(run, sizes, 0 if run.quick else args.int16_up_to)
    run.report["summary"] = summarize(run.rows)
    return 0


def table(report: dict) -> list[str]:
    checks = report.get("checks", [])
    exact = sum(c.get("exact") is True for c in checks)
    lines = [
        (
            f"TOPS (int8) or TFLOP/s (float16), 2 S^3 operations a call; exact checks: {exact} of "
            f"{len(checks)}. `/f16 GEMM`: over dml_jax's float16 GEMM of the same size."
        ),
        "",
        "| size | implementation | case | rate | /f16 GEMM |",
        "|---:|---|---|---:|---:|",
    ]
    over = {(s["size"], s["case"]): s["over_dml_float16_gemm"] for s in report.get("summary", [])}
    for r in report["rows"]:
        rate = f"{r['tera_ops']:.1f}" if r.get("tera_ops") else r.get("error", "-")[:60]
        ratio = over.get((r["size"], r["case"]))
        ratio = f"{ratio:.2f}" if ratio and r["impl"] == "dml" else ""
        lines.append(f"| {r['size']} | {r['impl']} | {r['case']} | {rate} | {ratio} |")
    return lines
