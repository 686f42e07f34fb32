"""Benchmark harness: every operator (and REDUCE function) against hand-written jnp and PyTorch.

For each case it times, in one run and on one device:

- ``dml``: the compiled operator, called the public way (``op(x)``);
- ``dml-lax``: for cases that a GPU kernel (``dml_jax.kernels``) covers, the lax lowering the
  kernel replaces (``compile_operator(..., fast_paths=False)``), so the choice is documented by
  a measurement;
- ``jnp``: ``jax.jit`` of the obvious hand-written jnp function;
- ``torch``: PyTorch eager on the same device, when PyTorch is importable and sees it;

plus a device copy (``-x`` through XLA and, with PyTorch, ``Tensor.copy_``), whose best rate is
the roofline. Every hot time is the median of samples, each sample many dispatches followed by one
sync; the cold time (trace + compile + first call) is reported separately. Effective GB/s counts
the bytes that must move: every input read once and every output written once.

Also measured: host overhead of ``op(x)`` against ``jax.jit(handwritten)(x)`` on small tensors,
and validation + compile of an equal, freshly constructed descriptor from a warm cache.

Writes ``results.json`` (and ``results.png`` when matplotlib is installed, extra ``bench``) to
``--out``. ``--quick`` uses tiny tensors (for CPU and CI).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
    kernel: bool = False  # a GPU kernel may replace the lax lowering
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


@dataclass
class Timer:
    """Median-of-samples timing; each sample is many dispatches then one sync."""

    sample_s: float = 0.05
    samples: int = 5
    max_iters: int = 200
    log: list = field(default_factory=list)

    def run(self, call: Callable[[], Any], sync: Callable[[Any], None]) -> float:
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


def _dml_type(dtype: str) -> str:
    return np.dtype(dtype).name.upper()


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
    from dml_jax.registry import operators

    n_el = math.prod(shape)
    item = np.dtype(dtype).itemsize
    # copy: the roofline (an element-wise op XLA cannot elide; ~x for unsigned types)
    neg = (lambda x: ~x) if np.dtype(dtype).kind == "u" else (lambda x: -x)
    cases = [Case("copy", "copy", dtype, (shape,), None, neg, "copy", n_el * item)]
    for spec in operators():
        if spec.bench is None:
            continue
        for bc in spec.bench(shape, dtype, full):
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


def _buffer_call(desc: Any) -> Callable:
    """Buffer mode of ``desc``: a call on input buffers, the output buffers made once."""
    import jax.numpy as jnp

    import dml_jax as dml
    from dml_jax.buffers import buffer_function

    op = dml.compile_operator(desc)
    fn = buffer_function(op)
    outs = [jnp.zeros(t.addressed_elements, t.dtype) for t in op.output_descs]

    def call(*inputs):
        results = fn(*inputs, *outs)
        return results[0] if len(results) == 1 else results

    return call


def _in_place_call(desc: Any) -> Callable:
    """``desc`` run in place: the first input's buffer is donated and holds the output, so the
    XLA program writes over it; every call feeds the previous output back as that input."""
    import jax
    import jax.numpy as jnp

    import dml_jax as dml

    op = dml.compile_operator(desc)

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
    """A registry BenchCase as a timed Case: inputs are its desc's input sizes, bytes its outputs'."""
    import dml_jax as dml

    desc = bc.desc
    out_bytes = sum(t.element_count * t.data_type.size for _, t in desc.output_slots())
    if bc.buffers:
        shapes = tuple((t.addressed_elements,) for _, t in desc.input_slots())
        make = functools.partial(_buffer_call, desc)
    elif bc.in_place:
        shapes = tuple(t.sizes for _, t in desc.input_slots())
        make = functools.partial(_in_place_call, desc)
    else:
        shapes = tuple(t.sizes for _, t in desc.input_slots())
        make = functools.partial(dml.compile_operator, desc)
    return Case(
        bc.label,
        desc.operator_type,
        dtype,
        shapes,
        make,
        bc.jnp,
        bc.torch,
        out_bytes,
        kernel=bc.kernel,
        notes=bc.notes,
        input_dtypes=tuple(t.dtype.name for _, t in desc.input_slots()),
    )


# ---------------------------------------------------------------------------------------------
# Running


def _torch_or_none(device_kind: str):
    if device_kind != "gpu":
        return None, None
    try:
        import torch
    except ImportError:
        return None, None
    if not torch.cuda.is_available():
        return None, None
    return torch, torch.device("cuda")


def run_cases(cases: list[Case], timer: Timer, use_torch: bool, log=print) -> list[dict]:
    """Times every case; returns one row per (case, implementation)."""
    import jax

    import dml_jax as dml

    backend = jax.default_backend()
    torch, tdev = _torch_or_none(backend) if use_torch else (None, None)
    rows: list[dict] = []
    roofline: dict[str, float] = {}

    def jsync(out):
        jax.block_until_ready(out)

    def tsync(out):
        torch.cuda.synchronize()

    def record(case, impl, seconds, cold=None, error=None):
        gbps = case.bytes / seconds / 1e9 if seconds else None
        row = dict(
            case=case.name,
            op=case.op,
            dtype=case.dtype,
            shape=list(case.shapes[0]) if case.shapes else [],  # generators: no input
            bytes=case.bytes,
            impl=impl,
            seconds=seconds,
            gbps=gbps,
            cold_s=cold,
            error=error,
        )
        if case.op == "copy" and gbps:
            roofline[case.dtype] = max(roofline.get(case.dtype, 0.0), gbps)
        rows.append(row)
        if gbps:
            log(
                f"  {case.name:40s} {case.dtype:8s} {impl:8s} {gbps:9.1f} GB/s"
                + (f"  (cold {cold:.2f} s)" if cold is not None else "")
            )
        else:
            log(f"  {case.name:40s} {case.dtype:8s} {impl:8s} error: {error}")

    for ci, case in enumerate(cases):
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
                if case.kernel and backend == "gpu":
                    # The lax lowering the kernel (or word form) replaces, for the record.
                    lax_op = dml.compile_operator(op.desc, op.feature_level, fast_paths=False)
                    lax_fn = jax.jit(lax_op.fn)
                    record(case, "dml-lax", timer.run(lambda: lax_fn(*xs), jsync))
            except Exception as e:  # a case the device or data type cannot run: reported
                record(case, "dml", None, error=f"{type(e).__name__}: {e}"[:300])
        if case.jnp_fn is not None:
            f = jax.jit(case.jnp_fn)
            record(case, "jnp", timer.run(lambda: f(*xs), jsync))
        del xs
        if torch is not None and case.torch_fn is not None:
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
                record(case, "torch", None, error=f"{type(e).__name__}: {e}"[:300])
            torch.cuda.empty_cache()
    for row in rows:
        roof = roofline.get(row["dtype"])
        row["ratio_to_copy"] = row["gbps"] / roof if row["gbps"] and roof else None
    return rows


def measure_overhead(calls: int = 2000, log=print) -> dict:
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
    timer = Timer(sample_s=0.0, samples=7, max_iters=calls)
    out = {"calls_per_sample": calls, "shape": list(shape), "operators": {}}
    for name, (make, hand) in makers.items():
        op = dml.compile_operator(make())
        f = jax.jit(hand)
        # sample_s=0 would mean 3 iterations; time exactly `calls` dispatches per sample.
        timer.sample_s = 1e9
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


def environment() -> dict:
    import jax

    dev = jax.devices()[0]
    env = dict(
        date=datetime.date.today().isoformat(),
        jax=jax.__version__,
        backend=jax.default_backend(),
        device=getattr(dev, "device_kind", str(dev)),
        python=platform.python_version(),
        machine=platform.machine(),
    )
    try:
        import torch

        env["torch"] = torch.__version__
    except ImportError:
        env["torch"] = None
    return env


def write_png(rows: list[dict], path: str, log=print) -> bool:
    """Bar chart of GB/s per case and implementation, with the copy roofline as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install 'dml-jax[bench]'): skipping the PNG")
        return False
    impls = ["dml", "dml-lax", "jnp", "torch"]
    keys = []
    for r in rows:
        k = (r["case"], r["dtype"])
        if k not in keys:
            keys.append(k)
    table = {(r["case"], r["dtype"], r["impl"]): r["gbps"] or 0.0 for r in rows}
    fig, ax = plt.subplots(figsize=(max(10, len(keys) * 0.45), 6))
    width = 0.8 / len(impls)
    for j, impl in enumerate(impls):
        ax.bar(
            [i + j * width for i in range(len(keys))],
            [table.get((c, d, impl), 0.0) for c, d in keys],
            width,
            label=impl,
        )
    roofs = {
        r["dtype"]: max(
            (q["gbps"] or 0) for q in rows if q["op"] == "copy" and q["dtype"] == r["dtype"]
        )
        for r in rows
        if any(q["op"] == "copy" and q["dtype"] == r["dtype"] for q in rows)
    }
    for dtype, roof in roofs.items():
        xs = [i for i, (_, d) in enumerate(keys) if d == dtype]
        ax.hlines(
            [roof, 0.9 * roof],
            min(xs) - 0.2,
            max(xs) + 0.8,
            colors=["k", "gray"],
            linestyles=["-", "--"],
        )
    ax.set_xticks([i + 0.4 for i in range(len(keys))])
    ax.set_xticklabels([f"{c} [{d}]" for c, d in keys], rotation=90, fontsize=7)
    ax.set_ylabel("effective GB/s (bytes read + written)")
    ax.set_title("dml_jax vs hand-written jnp vs PyTorch; line: copy roofline, dashed: 90%")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _parse_shape(text: str) -> tuple[int, ...]:
    shape = tuple(int(s) for s in text.split(","))
    if len(shape) != 4 or shape[1] % 4 or shape[2] % 2 or shape[3] % 2:
        raise argparse.ArgumentTypeError("need N,C,H,W with C % 4 == 0 and H, W even")
    return shape


def main(argv: list[str] | None = None) -> int:
    """``dml-jax bench``: runs the suite and writes results.json (and results.png)."""
    parser = argparse.ArgumentParser(prog="dml-jax bench", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"tiny tensors {QUICK_SHAPE} (CPU / CI); default 1 GiB of float32",
    )
    parser.add_argument(
        "--shape",
        type=_parse_shape,
        default=None,
        help="float32 shape N,C,H,W (other dtypes scale N to equal bytes)",
    )
    parser.add_argument(
        "--dtypes",
        default="float32,float16,int8",
        help="comma-separated data types (default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        default=None,
        help="run only cases whose name contains this ('A|B': either)",
    )
    parser.add_argument("--out", default="benchmarks/results", help="output folder")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    parser.add_argument(
        "--no-overhead",
        action="store_true",
        help="skip the host-overhead and compile-time measurements",
    )
    parser.add_argument("--samples", type=int, default=5)
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    # Let JAX and PyTorch share the GPU: without this JAX takes 75% of it up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    try:
        for d in dtypes:
            np.dtype(d)
    except TypeError as e:
        print(f"dml-jax bench: bad --dtypes: {e}", file=sys.stderr)
        return 2
    base = args.shape or (QUICK_SHAPE if args.quick else GIB_SHAPE_F32)
    env = environment()
    print(f"dml-jax bench on {env['device']} ({env['backend']}), jax {env['jax']}, {env['date']}")
    timer = Timer(sample_s=0.005 if args.quick else 0.05, samples=args.samples)
    rows = []
    shapes = {}
    for dtype in dtypes:
        scale = 1 if args.quick or args.shape else max(1, 4 // np.dtype(dtype).itemsize)
        shape = (base[0] * scale,) + tuple(base[1:])
        shapes[dtype] = list(shape)
        cases = build_cases(shape, [dtype], full=True)
        if args.only:
            wanted = args.only.split("|")
            cases = [c for c in cases if any(w in c.name for w in wanted) or c.op == "copy"]
        print(f"{dtype} {shape}: {len(cases)} cases")
        rows += run_cases(cases, timer, use_torch=not args.no_torch)
    report = dict(environment=env, shapes=shapes, quick=args.quick, results=rows)
    if not args.no_overhead:
        print("host overhead and warm compile (small tensors):")
        report["overhead"] = measure_overhead(500 if args.quick else 2000)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"wrote {path}")
    if write_png(rows, os.path.join(args.out, "results.png")):
        print(f"wrote {os.path.join(args.out, 'results.png')}")
    print(summary(rows))
    return 0


def summary(rows: list[dict]) -> str:
    """A short text table: GB/s of each implementation and dml's ratio to the copy."""
    by = {}
    for r in rows:
        by.setdefault((r["case"], r["dtype"]), {})[r["impl"]] = r
    lines = [
        (
            f"{'case':40s} {'dtype':8s} {'dml':>8s} {'lax':>8s} {'jnp':>8s} {'torch':>8s} "
            f"{'dml/copy':>8s}"
        )
    ]
    for (case, dtype), impls in by.items():

        def g(k):
            r = impls.get(k)
            return f"{r['gbps']:8.0f}" if r and r["gbps"] else f"{'-':>8s}"

        ratio = impls.get("dml", {}).get("ratio_to_copy")
        lines.append(
            f"{case:40s} {dtype:8s} {g('dml')} {g('dml-lax')} {g('jnp')} {g('torch')} "
            + (f"{ratio:8.2f}" if ratio else f"{'-':>8s}")
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
