"""The operator suite: every operator's bench cases (and each REDUCE function) against
hand-written jnp and PyTorch, in GB/s and as a fraction of a device copy.

For each case of the bench catalog (``dml_jax.bench.catalog``) it times, in one run and on one
device:

- ``dml``: the compiled operator, called the public way (``op(x)``);
- ``dml-lax``: where a fast path of ``dml_jax.fastpath`` applies to the case (on a GPU), the lax
  lowering the fast path replaces (``compile_operator(..., fast_paths=False)``), called the way
  ``dml`` is (plain, in buffer mode or in place), so the choice is documented by a measurement;
- ``jnp``: ``jax.jit`` of the obvious hand-written jnp function;
- ``torch``: PyTorch eager on the same device, when PyTorch is importable and sees it;

plus a device copy (``-x`` through XLA and, with PyTorch, ``Tensor.copy_``), whose best rate is
the roofline (``ratio_to_copy``). Effective GB/s counts the bytes that must move: every input
read once and every output written once. Also measured: the host overhead of ``op(x)`` against
``jax.jit(handwritten)(x)`` on small tensors, and validation + compile of an equal, freshly
constructed descriptor from a warm cache (``overhead``).

Default shape: 1 GiB of float32 (16, 256, 256, 256); ``--quick``: (2, 8, 16, 32); ``--shape``:
any float32 N,C,H,W. Every data type runs at the same bytes: its batch is N times 4 over its
item size (``shape_for``), so a case whose inputs and outputs all have the run's data type and
shape moves as many bytes in each.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..harness import Run, Timer, error_text

GIB_SHAPE_F32 = (16, 256, 256, 256)  # 2**28 elements: 1 GiB of float32
QUICK_SHAPE = (2, 8, 16, 32)


@dataclass
class Case:
    """One benchmarked operation on one data type and shape."""

    name: str  # e.g. "REDUCE SUM axis 3"
    op: str  # operator type, or "copy" / "graph"
    dtype: str
    shapes: tuple[tuple[int, ...], ...]  # input shapes
    make_dml: Callable[[], Any] | None  # -> CompiledOperator-like callable
    jnp_fn: Callable | None
    torch_fn: Callable | None
    out_bytes: int
    # Where a GPU fast path applies: make_dml's call with the lax lowering it replaces.
    make_lax: Callable[[], Any] | None = None
    notes: str = ""
    input_dtypes: tuple[str, ...] = ()  # per input, where they differ from dtype (IF's condition)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return self.input_dtypes or (self.dtype,) * len(self.shapes)

    @property
    def in_bytes(self) -> int:
        return sum(math.prod(s) * np.dtype(d).itemsize for s, d in zip(self.shapes, self.dtypes))

    @property
    def bytes(self) -> int:
        return self.in_bytes + self.out_bytes


# ---------------------------------------------------------------------------------------------
# Inputs


def _jax_input(shape, dtype: str, seed: int):
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return jax.random.normal(key, shape, jnp.float32).astype(dt)
    lo, hi = (0, 100) if dt.kind == "u" else (-100, 100)
    return jax.random.randint(key, shape, lo, hi, jnp.int32).astype(dt)


def _torch_input(torch, shape, dtype: str, device):
    dt = getattr(torch, np.dtype(dtype).name)
    if np.dtype(dtype).kind == "f":
        return torch.randn(shape, device=device, dtype=torch.float32).to(dt)
    lo = 0 if np.dtype(dtype).kind == "u" else -100
    return torch.randint(lo, 100, shape, device=device, dtype=torch.int32).to(dt)


# ---------------------------------------------------------------------------------------------
# Cases


def build_cases(shape: tuple[int, ...], dtypes: Sequence[str], full: bool) -> list[Case]:
    """The benchmark cases for a 4-D ``shape`` (N, C, H, W; C, H, W even)."""
    cases = []
    for dtype in dtypes:
        cases += _cases_for(shape, dtype, full=full and dtype == "float32")
    return cases


def _cases_for(shape, dtype: str, full: bool) -> list[Case]:
    """The copy roofline, every registered operator's own cases, and a CLIP -> REDUCE graph."""
    import jax.numpy as jnp

    import dml_jax as dml
    from dml_jax.bench import catalog
    from dml_jax.registry import operators

    n_el = math.prod(shape)
    item = np.dtype(dtype).itemsize
    # copy: the roofline (an element-wise op XLA cannot elide; ~x for unsigned types)
    neg = (lambda x: ~x) if np.dtype(dtype).kind == "u" else (lambda x: -x)
    cases = [Case("copy", "copy", dtype, (shape,), None, neg, "copy", n_el * item)]
    for spec in operators():
        for bc in catalog.cases(spec, shape, dtype, full):
            cases.append(_case_of(bc, dtype))
    if full:
        td = dml.TensorDesc(np.dtype(dtype).name.upper(), shape)
        lo, hi = (-0.5, 0.5) if np.dtype(dtype).kind == "f" else (10, 60)
        n, c, h, _ = shape

        def graph():
            clip = dml.ElementWiseClip1OperatorDesc(td, td, min=lo, max=hi)
            red = dml.ReduceOperatorDesc("SUM", td, td.like(sizes=(n, c, h, 1)), axes=[3])
            return dml.compile_graph(
                dml.GraphDesc(
                    1,
                    1,
                    [clip, red],
                    input_edges=[dml.InputGraphEdge(0, 0, 0)],
                    output_edges=[dml.OutputGraphEdge(1, 0, 0)],
                    intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
                )
            )

        cases.append(
            Case(
                "graph CLIP -> REDUCE SUM axis 3",
                "graph",
                dtype,
                (shape,),
                graph,
                lambda x: jnp.sum(jnp.clip(x, lo, hi), axis=3, keepdims=True),
                lambda torch, x: torch.clamp(x, lo, hi).sum(dim=3, keepdim=True),
                n * c * h * item,
            )
        )
    return cases


def _lax_call(desc: Any) -> Callable:
    """``desc``'s lax lowering, jitted, with no fast path (what a fast path replaces)."""
    import jax

    import dml_jax as dml

    return jax.jit(dml.compile_operator(desc, fast_paths=False).fn)


def _buffer_call(desc: Any, fast_paths: bool = True) -> Callable:
    """Buffer mode of ``desc``: a call on input buffers, the output buffers made once."""
    import jax.numpy as jnp

    import dml_jax as dml
    from dml_jax.buffers import buffer_function

    op = dml.compile_operator(desc, fast_paths=fast_paths)
    fn = buffer_function(op)
    outs = [jnp.zeros(t.addressed_elements, t.dtype) for t in op.output_descs]

    def call(*inputs):
        results = fn(*inputs, *outs)
        return results[0] if len(results) == 1 else results

    return call


def _in_place_call(desc: Any, fast_paths: bool = True) -> Callable:
    """``desc`` run in place: the first input's buffer is donated and holds the output, so the
    XLA program writes over it; every call feeds the previous output back as that input."""
    import jax
    import jax.numpy as jnp

    import dml_jax as dml

    op = dml.compile_operator(desc, fast_paths=fast_paths)

    def first_output(a, *rest):
        result = op.fn(a, *rest)
        return result[0] if isinstance(result, (tuple, list)) else result

    fn = jax.jit(first_output, donate_argnums=0)
    state: list = []

    def call(first, *rest):
        if not state:
            state.append(jnp.array(first, copy=True))  # the caller's array is never donated
        state[0] = fn(state[0], *rest)
        return state[0]

    return call


def _case_of(bc: Any, dtype: str) -> Case:
    """A registry BenchCase as a timed Case: inputs are its desc's input sizes, bytes its outputs'.
    Its ``make_lax`` (where a fast path applies) wraps the lax lowering as ``make_dml`` wraps the
    operator: a compiled operator has a ``desc`` to recompile, a buffer or in-place call has not."""
    import dml_jax as dml
    from dml_jax import fastpath

    desc = bc.desc
    out_bytes = sum(t.element_count * t.data_type.size for _, t in desc.output_slots())
    if bc.buffers:
        shapes = tuple((t.addressed_elements,) for _, t in desc.input_slots())
        make = functools.partial(_buffer_call, desc)
        make_lax = functools.partial(_buffer_call, desc, fast_paths=False)
    elif bc.in_place:
        shapes = tuple(t.sizes for _, t in desc.input_slots())
        make = functools.partial(_in_place_call, desc)
        make_lax = functools.partial(_in_place_call, desc, fast_paths=False)
    else:
        shapes = tuple(t.sizes for _, t in desc.input_slots())
        make = functools.partial(dml.compile_operator, desc)
        make_lax = functools.partial(_lax_call, desc)
    return Case(
        bc.label,
        desc.operator_type,
        dtype,
        shapes,
        make,
        bc.jnp,
        bc.torch,
        out_bytes,
        # A fast path applies: the lax lowering it replaces is timed too ("dml-lax").
        make_lax=make_lax if fastpath.select(desc) is not None else None,
        notes=bc.notes,
        input_dtypes=tuple(t.dtype.name for _, t in desc.input_slots()),
    )


# ---------------------------------------------------------------------------------------------
# Running


def run_cases(cases: list[Case], run: Run, lax_rows: bool | None = None) -> None:
    """Times every case; one row per (case, implementation).

    Args:
        lax_rows: time the lax lowering beside each case a fast path covers (``dml-lax``);
            None: on a GPU, the one platform whose programs take fast paths.
    """
    import jax

    if lax_rows is None:
        lax_rows = jax.default_backend() == "gpu"
    torch = run.torch
    timer = run.timer
    roofline: dict[str, float] = {}

    def jsync(out):
        jax.block_until_ready(out)

    def tsync(out):
        torch.cuda.synchronize()

    def record(case, impl, seconds, cold=None, error=None):
        gbps = case.bytes / seconds / 1e9 if seconds else None
        if case.op == "copy" and gbps:
            roofline[case.dtype] = max(roofline.get(case.dtype, 0.0), gbps)
        roof = roofline.get(case.dtype)
        run.add(
            dict(
                case=case.name,
                op=case.op,
                dtype=case.dtype,
                shape=list(case.shapes[0]) if case.shapes else [],  # generators: no input
                bytes=case.bytes,
                impl=impl,
                seconds=seconds,
                gbps=gbps,
                cold_s=cold,
                ratio_to_copy=gbps / roof if gbps and roof else None,
                error=error,
            )
        )

    for ci, case in enumerate(cases):
        if run.over_budget():
            run.skip(f"cases from {case.name} {case.dtype} on", f"--budget-s {run.args.budget_s}")
            break
        xs = [
            _jax_input(s, d, ci * 7 + k) for k, (s, d) in enumerate(zip(case.shapes, case.dtypes))
        ]
        jax.block_until_ready(xs)
        if case.make_dml is not None:
            try:
                t = time.perf_counter()
                op = case.make_dml()
                jsync(op(*xs))
                cold = time.perf_counter() - t
                record(case, "dml", timer.run(lambda: op(*xs), jsync), cold)
            except Exception as e:  # a case the device or data type cannot run: reported
                record(case, "dml", None, error=error_text(e))
            else:
                if case.make_lax is not None and lax_rows:
                    # The lax lowering the fast path replaces, for the record.
                    try:
                        lax_fn = case.make_lax()
                        record(case, "dml-lax", timer.run(lambda: lax_fn(*xs), jsync))
                    except Exception as e:
                        record(case, "dml-lax", None, error=error_text(e))
        if case.jnp_fn is not None:
            f = jax.jit(case.jnp_fn)
            record(case, "jnp", timer.run(lambda: f(*xs), jsync))
        del xs
        if torch is not None and case.torch_fn is not None:
            tdev = torch.device("cuda")
            try:
                ts = [_torch_input(torch, s, d, tdev) for s, d in zip(case.shapes, case.dtypes)]
                if case.torch_fn == "copy":
                    dst = torch.empty_like(ts[0])
                    record(case, "torch", timer.run(lambda: dst.copy_(ts[0]), tsync))
                    del dst
                else:
                    record(case, "torch", timer.run(lambda: case.torch_fn(torch, *ts), tsync))
                del ts
            except Exception as e:
                record(case, "torch", None, error=error_text(e))
            torch.cuda.empty_cache()


def measure_overhead(timer_samples: int, calls: int = 2000, log=print) -> dict:
    """Host overhead on small tensors, and validation + compile from a warm cache."""
    import jax
    import jax.numpy as jnp

    import dml_jax as dml

    shape = (2, 3, 4, 5)
    td = dml.TensorDesc("FLOAT32", shape)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), jnp.float32)
    makers = {
        "CLIP": (
            lambda: dml.ElementWiseClip1OperatorDesc(td, td, min=-0.5, max=0.5),
            lambda y: jnp.clip(y, -0.5, 0.5),
        ),
        "REDUCE SUM axis 1": (
            lambda: dml.ReduceOperatorDesc("SUM", td, td.like(sizes=(2, 1, 4, 5)), axes=[1]),
            lambda y: jnp.sum(y, axis=1, keepdims=True),
        ),
        "SPLIT axis 3": (
            lambda: dml.SplitOperatorDesc(
                td, [td.like(sizes=(2, 3, 4, 1)), td.like(sizes=(2, 3, 4, 4))], axis=3
            ),
            lambda y: (y[..., :1], y[..., 1:]),
        ),
    }
    timer = Timer(sample_s=1e9, samples=timer_samples, max_iters=calls)
    out = {"calls_per_sample": calls, "shape": list(shape), "operators": {}}
    for name, (make, hand) in makers.items():
        op = dml.compile_operator(make())
        f = jax.jit(hand)
        t_op = timer.run(lambda: op(x), jax.block_until_ready)
        t_jit = timer.run(lambda: f(x), jax.block_until_ready)
        descs = [make() for _ in range(calls)]  # equal, freshly constructed descriptors
        dml.compile_operator(descs[0])
        t = time.perf_counter()
        for d in descs:
            dml.compile_operator(d)
        t_compile = (time.perf_counter() - t) / calls
        t = time.perf_counter()
        for _ in range(calls // 4):
            dml.compile_operator(make())
        t_build_compile = (time.perf_counter() - t) / (calls // 4)
        out["operators"][name] = dict(
            op_call_us=t_op * 1e6,
            jit_call_us=t_jit * 1e6,
            overhead_ratio=t_op / t_jit,
            compile_warm_us=t_compile * 1e6,
            construct_and_compile_warm_us=t_build_compile * 1e6,
        )
        log(
            f"  {name:20s} op(x) {t_op * 1e6:7.1f} us  jit(hand)(x) {t_jit * 1e6:7.1f} us  "
            f"ratio {t_op / t_jit:5.3f}  compile(warm) {t_compile * 1e6:6.1f} us  "
            f"construct+compile {t_build_compile * 1e6:6.1f} us"
        )
    return out


def shape_for(base: tuple[int, ...], dtype: str) -> tuple[int, ...]:
    """The shape of ``dtype`` that holds as many bytes as the float32 shape ``base``: its batch
    (first dimension) times 4 over the data type's item size.

    Raises:
        ValueError: where that batch is not a whole number (float64 from an odd batch).
    """
    item = np.dtype(dtype).itemsize
    if base[0] * 4 % item:
        raise ValueError(
            f"a float32 batch of {base[0]} has no {np.dtype(dtype).name} batch of the same bytes "
            f"(it must be a multiple of {item // math.gcd(4, item)})"
        )
    return (base[0] * 4 // item,) + tuple(base[1:])


def _parse_shape(text: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in text.split(","))
    if len(shape) != 4 or shape[1] % 4 or shape[2] % 2 or shape[3] % 2:
        raise argparse.ArgumentTypeError("need N,C,H,W with C % 4 == 0 and H, W even")
    return shape


def add_arguments(p: Any) -> None:
    p.add_argument(
        "--shape",
        type=_parse_shape,
        default=None,
        help=f"float32 shape N,C,H,W; every other data type scales N to the same bytes "
        f"(default {GIB_SHAPE_F32}, --quick {QUICK_SHAPE})",
    )
    p.add_argument(
        "--dtypes",
        default="float32,float16,int8",
        help="comma-separated data types (default: %(default)s)",
    )
    p.add_argument("--only", default=None, help="cases whose name contains this ('A|B': either)")
    p.add_argument(
        "--no-overhead", action="store_true", help="skip the host-overhead and compile times"
    )


def run(run: Run) -> int:
    args = run.args
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    try:
        for d in dtypes:
            np.dtype(d)
    except TypeError as e:
        run.log(f"dml-jax bench: bad --dtypes: {e}")
        return 2
    base = args.shape or (QUICK_SHAPE if run.quick else GIB_SHAPE_F32)
    try:
        by_dtype = {d: shape_for(base, d) for d in dtypes}
    except ValueError as e:
        run.log(f"dml-jax bench: bad --shape for --dtypes: {e}")
        return 2
    run.report["shapes"] = shapes = {}
    for dtype, shape in by_dtype.items():
        shapes[dtype] = list(shape)
        cases = build_cases(shape, [dtype], full=True)
        if args.only:
            wanted = args.only.split("|")
            cases = [c for c in cases if any(w in c.name for w in wanted) or c.op == "copy"]
        run.log(f"{dtype} {shape}: {len(cases)} cases")
        run_cases(cases, run)
    if not args.no_overhead and not run.over_budget():
        run.log("host overhead and warm compile (small tensors):")
        run.report["overhead"] = measure_overhead(
            run.args.samples, 500 if run.quick else 2000, run.log
        )
    return 0


# ---------------------------------------------------------------------------------------------
# The results page


def table(report: dict) -> list[str]:
    """The operators at >= 0.90 of the copy in every measured case, in one line; then one line
    per other operator type: the range of dml's ratio to the copy over its cases per data type,
    and the case furthest below the copy; then the host overhead."""
    rows = [r for r in report["rows"] if r["impl"] == "dml" and r["op"] != "copy"]
    dtypes = list(dict.fromkeys(r["dtype"] for r in report["rows"]))
    by_op: dict[str, list[dict]] = {}
    for r in rows:
        by_op.setdefault(r["op"].removeprefix("DML_OPERATOR_"), []).append(r)
    copies: dict[str, float] = {}  # the best copy of each data type (XLA's or PyTorch's)
    for r in report["rows"]:
        if r["op"] == "copy" and r["gbps"]:
            copies[r["dtype"]] = max(copies.get(r["dtype"], 0.0), r["gbps"])
    at_copy, below = [], []
    for op in sorted(by_op):
        ratios = [r["ratio_to_copy"] for r in by_op[op] if r["ratio_to_copy"]]
        errors = [r for r in by_op[op] if r.get("error")]
        (at_copy if ratios and min(ratios) >= 0.9 and not errors else below).append(op)
    lines = [
        "Effective GB/s of `op(x)` (inputs read once, outputs written once) over the best device "
        "copy of the same run and data type"
        + (" (" + ", ".join(f"{d} {g:.0f} GB/s" for d, g in copies.items()) + ")" if copies else "")
        + ".",
        "",
        f"At 0.90 of the copy or more in every case measured ({len(at_copy)} operators): "
        + ", ".join(at_copy)
        + ".",
        "",
        "The others (min-max over an operator's cases):",
        "",
        "| operator | cases | " + " | ".join(dtypes) + " | lowest case |",
        "|---|---:|" + "---:|" * len(dtypes) + "---|",
    ]
    for op in below:
        cases = by_op[op]
        cells = []
        for d in dtypes:
            ratios = [r["ratio_to_copy"] for r in cases if r["dtype"] == d and r["ratio_to_copy"]]
            errors = [r for r in cases if r["dtype"] == d and r.get("error")]
            if ratios:
                lo, hi = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
                cells.append(lo if lo == hi else f"{lo}-{hi}")
            else:
                cells.append("error" if errors else "")
        measured = [r for r in cases if r["ratio_to_copy"]]
        low = min(measured, key=lambda r: r["ratio_to_copy"], default=None)
        note = f"{low['case']} {low['dtype']}" if low and len(cases) > 1 else ""
        lines.append(f"| {op} | {len({r['case'] for r in cases})} | {' | '.join(cells)} | {note} |")
    overhead = report.get("overhead")
    if overhead:
        lines += ["", "Host overhead, `op(x)` over `jax.jit(handwritten)(x)` on small tensors: "
                  + ", ".join(f"{k} {v['overhead_ratio']:.2f}"
                              for k, v in overhead["operators"].items())
                  + "; validation + compile from a warm cache: "
                  + ", ".join(f"{v['compile_warm_us']:.0f}"
                              for v in overhead["operators"].values()) + " us."]  # fmt: skip
    return lines
