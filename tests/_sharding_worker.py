"""Sharding checks on 8 simulated CPU devices, run in a subprocess by tests/test_sharding.py.

The pytest process keeps one device; this script sets ``XLA_FLAGS`` before importing JAX, runs
every case of ``plan()`` and prints one JSON object on the last line of stdout:
``{"cases": {case_id: {"ok": bool, "detail": str}}, "collectives": [...]}``.

Every case compares a sharded run with the unsharded run of the same program on one device
(``jax.jit(op.fn)`` on plain NumPy inputs): bit-exact for data movement, CLIP and ARGMIN/ARGMAX,
within float tolerance for float reductions. ARGMIN/ARGMAX cases with ties across shard
boundaries are also checked against a NumPy reference written from the spec (first index of
equal extremes for INCREASING, last for DECREASING, row-major over the reduced axes).

``plan()`` imports nothing heavy, so the pytest side can parametrize over the case ids.
"""

from __future__ import annotations

import json
import os
import re
import time

from _workers import collective_counts  # this folder's

DEVICES = 8
SHAPE = (8, 8, 8, 8)

# Operators of the all-operator sweep (name -> built in _operators()).
OPERATORS = (
    "SPLIT",
    "JOIN",
    "DEPTH_TO_SPACE",
    "DEPTH_TO_SPACE1",
    "SPACE_TO_DEPTH",
    "SPACE_TO_DEPTH1",
    "ELEMENT_WISE_CLIP",
    "ELEMENT_WISE_CLIP1",
    "ELEMENT_WISE_CLIP_GRAD",
    "ELEMENT_WISE_CLIP_GRAD1",
    "TILE",
    "REDUCE",
    "ARGMIN",
    "ARGMAX",
)
# Float reductions: compared within tolerance; everything else bit-exact.
INEXACT = {"REDUCE"}

# Layouts: one tensor axis over a 1-D mesh of 8, or two axes (mesh axes a, b) over a 2x4 mesh.
# The 2-D pairs put each tensor axis under a mesh axis at least once, and axis 1 (where SPLIT,
# JOIN, TILE and the depth/space channels act) under both a and b.
LAYOUTS_1D = tuple((ax,) for ax in range(4))
LAYOUTS_2D = ((0, 1), (1, 2), (2, 3), (0, 3))
LAYOUTS = LAYOUTS_1D + LAYOUTS_2D

REDUCE_FUNCTIONS = (
    "SUM",
    "AVERAGE",
    "MULTIPLY",
    "MIN",
    "MAX",
    "L1",
    "L2",
    "SUM_SQUARE",
    "LOG_SUM",
    "LOG_SUM_EXP",
)
TIE_CASES = (
    "first_across_shards",
    "nan_across_shards",
    "all_equal",
    "two_axes_2d_mesh",
    "random_small_ints_1d",
    "random_small_ints_2d",
    "reduce_function_argmax",
)
COMM_SCENARIOS = (
    "SPLIT-uneven-3+5",
    "SPLIT-even-8+8",
    "JOIN-8+16",
    "TILE-repeats-1x2x1x1",
    "DEPTH_TO_SPACE1-CRD-32ch",
    "DEPTH_TO_SPACE1-DCR-32ch",
)
# Whole networks (examples/networks.py) sharded through in_shardings only.
NETWORK_CASES = (
    "resnet-small/data-parallel-x8",
    "gpt-small/tensor-parallel-x8",
    "gpt-long/tensor-parallel-x8",
    "gpt-small/data-a2-tensor-b4",
    "benchmark-quick/2-devices",
)


def layout_name(layout: tuple[int, ...]) -> str:
    if len(layout) == 1:
        return f"axis{layout[0]}-over-x8"
    return f"axes{layout[0]}{layout[1]}-over-a2xb4"


def plan() -> list[str]:
    """Every case id this worker reports, in order (pure Python, no JAX import)."""
    ids = []
    for op in OPERATORS:
        for layout in LAYOUTS:
            ids.append(f"op/{op}/{layout_name(layout)}/jit-fn-explicit-mesh")
            if len(layout) == 1:  # auto axes: the plain GSPMD path, one axis is enough
                ids.append(f"op/{op}/{layout_name(layout)}/jit-fn-auto-mesh")
            ids.append(f"op/{op}/{layout_name(layout)}/compile-with-shardings")
    for fn in REDUCE_FUNCTIONS:
        ids.append(f"reduce/{fn}/float32/reduced-axis-sharded")
        ids.append(f"reduce/{fn}/float32/both-reduced-axes-sharded-2d")
    for fn in ("SUM", "MULTIPLY", "MIN", "MAX"):
        ids.append(f"reduce/{fn}/int32/reduced-axis-sharded-exact")
    for name in TIE_CASES:
        for op in ("ARGMIN", "ARGMAX"):
            for direction in ("INCREASING", "DECREASING"):
                ids.append(f"ties/{name}/{op}/{direction}")
    for layout in LAYOUTS:
        ids.append(f"graph/clip-reduce-join/{layout_name(layout)}/jit-fn-explicit-mesh")
        ids.append(f"graph/clip-reduce-join/{layout_name(layout)}/compile-with-shardings")
    for label in COMM_SCENARIOS:
        ids.append(f"comm/{label}/batch-or-rows-sharded-no-collectives")
        if label == "DEPTH_TO_SPACE1-CRD-32ch":
            ids.append(f"comm/{label}/channels-sharded-no-collectives")
    ids += [f"network/{case}" for case in NETWORK_CASES]
    return ids


# --------------------------------------------------------------------------------------------
# Everything below runs only in the subprocess.


def _setup():
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={DEVICES}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


def main() -> None:
    _setup()
    import jax
    import numpy as np
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    import dml_jax as dml
    from dml_jax import hlo

    if jax.device_count() < DEVICES:
        raise SystemExit(f"need {DEVICES} devices, got {jax.devices()}")

    rng = np.random.default_rng(1234)
    results: dict[str, dict] = {}
    started = time.perf_counter()

    sections: dict[str, float] = {}

    def lap(name: str) -> None:
        sections[name] = round(time.perf_counter() - started - sum(sections.values()), 2)

    def record(case_id: str, fn, *args, **kwargs) -> None:
        try:
            ok, detail = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a raw JAX error fails that case, not the run
            ok, detail = False, f"{type(e).__name__}: {str(e)[:600]}"
        results[case_id] = {"ok": bool(ok), "detail": detail}

    meshes = {
        (1, AxisType.Explicit): jax.make_mesh((8,), ("x",), axis_types=(AxisType.Explicit,)),
        (1, AxisType.Auto): jax.make_mesh((8,), ("x",), axis_types=(AxisType.Auto,)),
        (2, AxisType.Explicit): jax.make_mesh(
            (2, 4), ("a", "b"), axis_types=(AxisType.Explicit,) * 2
        ),
        (2, AxisType.Auto): jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,) * 2),
    }
    assert meshes[(1, AxisType.Explicit)].axis_types == jax.make_mesh((8,), ("x",)).axis_types

    def spec_for(layout, rank):
        names = ("x",) if len(layout) == 1 else ("a", "b")
        entries = [None] * rank
        for ax, name in zip(layout, names):
            entries[ax] = name
        return P(*entries)

    def sharding_for(layout, kind, rank):
        return NamedSharding(meshes[(len(layout), kind)], spec_for(layout, rank))

    def fitting_sharding(s, shape):
        """s where every sharded dimension of shape divides evenly, else None (XLA's choice)."""
        for d, entry in enumerate(s.spec):
            if entry is not None and shape[d] % s.mesh.shape[entry] != 0:
                return None
        return s

    def leaves(r):
        return [np.asarray(a) for a in (r if isinstance(r, tuple) else (r,))]

    def compare(got, want, exact, rtol=1e-5, atol=1e-6):
        got, want = leaves(got), leaves(want)
        if len(got) != len(want):
            return False, f"{len(got)} outputs, expected {len(want)}"
        for k, (g, w) in enumerate(zip(got, want)):
            if g.shape != w.shape or g.dtype != w.dtype:
                return False, f"output {k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
            if exact:
                # Bit patterns, so -0.0 vs 0.0 or NaN payloads would count as differences.
                same = np.array_equal(g.view(np.uint8), w.view(np.uint8))
                if not same:
                    bad = int(np.sum(g != w))
                    return False, f"output {k}: {bad} elements differ (exact comparison)"
            elif not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
                err = float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64))))
                return False, f"output {k}: max abs error {err:g}"
        return True, "equal" if exact else f"within rtol={rtol:g} atol={atol:g}"

    # ---------------------------------------------------------------- the fourteen operators
    def T(sizes, dtype="FLOAT32"):
        return dml.TensorDesc(dtype, sizes)

    x = T(SHAPE)

    def _operators():
        n, c, h, w = SHAPE
        return {
            # Cut at 3 along axis 1: crosses shard boundaries when axis 1 is sharded.
            "SPLIT": dml.SplitOperatorDesc(x, [T((n, 3, h, w)), T((n, 5, h, w))], axis=1),
            "JOIN": dml.JoinOperatorDesc([x, T((n, 2 * c, h, w))], T((n, 3 * c, h, w)), axis=1),
            "DEPTH_TO_SPACE": dml.DepthToSpaceOperatorDesc(x, T((n, c // 4, 2 * h, 2 * w)), 2),
            "DEPTH_TO_SPACE1": dml.DepthToSpace1OperatorDesc(
                x, T((n, c // 4, 2 * h, 2 * w)), 2, "COLUMN_ROW_DEPTH"
            ),
            "SPACE_TO_DEPTH": dml.SpaceToDepthOperatorDesc(x, T((n, 4 * c, h // 2, w // 2)), 2),
            "SPACE_TO_DEPTH1": dml.SpaceToDepth1OperatorDesc(
                x, T((n, 4 * c, h // 2, w // 2)), 2, "COLUMN_ROW_DEPTH"
            ),
            "ELEMENT_WISE_CLIP": dml.ElementWiseClipOperatorDesc(
                x, x, min=-0.5, max=0.75, scale_bias=dml.ScaleBias(0.5, 0.25)
            ),
            "ELEMENT_WISE_CLIP1": dml.ElementWiseClip1OperatorDesc(
                T(SHAPE, "INT32"), T(SHAPE, "INT32"), min=-3, max=5
            ),
            "ELEMENT_WISE_CLIP_GRAD": dml.ElementWiseClipGradOperatorDesc(x, x, x, -0.5, 0.5),
            "ELEMENT_WISE_CLIP_GRAD1": dml.ElementWiseClipGrad1OperatorDesc(
                T(SHAPE, "FLOAT16"), T(SHAPE, "FLOAT16"), T(SHAPE, "FLOAT16"), -0.5, 0.5
            ),
            "TILE": dml.TileOperatorDesc(x, T((n, 2 * c, h, 3 * w)), [1, 2, 1, 3]),
            "REDUCE": dml.ReduceOperatorDesc("SUM", x, T((n, 1, h, 1)), [1, 3]),
            "ARGMIN": dml.ArgMinOperatorDesc(x, T((n, 1, h, 1), "UINT32"), [1, 3]),
            "ARGMAX": dml.ArgMaxOperatorDesc(
                x, T((n, c, 1, w), "INT32"), [2], axis_direction="DECREASING"
            ),
        }

    def random_input(t):
        if t.data_type.is_float:
            a = rng.standard_normal(t.sizes)
        else:
            a = rng.integers(-10, 11, size=t.sizes)
        return a.astype(t.dtype)

    def op_inputs(op_name, op):
        arrays = [random_input(t) for t in op.input_descs]
        if op_name in ("ARGMIN", "ARGMAX"):
            # Few distinct values: many ties, some across shard boundaries.
            arrays = [np.round(a * 1.5).astype(a.dtype) for a in arrays]
        return arrays

    def via_jit_fn(op, arrays, want, exact, layout, kind):
        placed = [jax.device_put(a, sharding_for(layout, kind, a.ndim)) for a in arrays]
        return compare(jax.jit(op.fn)(*placed), want, exact)

    def checked_calls(call):
        """(times ``CompiledOperator.check_inputs`` ran during ``call()``, its result)."""
        from dml_jax.compile import CompiledOperator

        count, original = [0], CompiledOperator.check_inputs

        def counted(self, inputs):
            count[0] += 1
            return original(self, inputs)

        CompiledOperator.check_inputs = counted
        try:
            result = call()
        finally:
            CompiledOperator.check_inputs = original
        return count[0], result

    def via_compile(op, arrays, want, exact, layout):
        # Alternate mesh axis types so both run through op(...) across the layouts.
        kind = AxisType.Explicit if LAYOUTS.index(layout) % 2 == 0 else AxisType.Auto
        ins = [sharding_for(layout, kind, t.rank) for t in op.input_descs]
        outs = [
            fitting_sharding(sharding_for(layout, kind, t.rank), t.sizes) for t in op.output_descs
        ]
        sharded = dml.compile_operator(op.desc, in_shardings=ins, out_shardings=outs)
        if sharded is op or sharded.fn is not op.fn:
            return False, "compile_operator with shardings must share op.fn"
        got = sharded(*arrays)  # NumPy inputs: op(...) places them
        ok, detail = compare(got, want, exact)
        # Arrays committed to another layout (here replicated) are moved, not rejected.
        elsewhere = [jax.device_put(a, NamedSharding(s.mesh, P())) for a, s in zip(arrays, ins)]
        ok2, detail2 = compare(sharded(*elsewhere), want, exact)
        if not ok2:
            return False, f"inputs committed elsewhere: {detail2}"
        for k, (g, s) in enumerate(zip(leaves_arrays(got), outs)):
            if s is not None and not g.sharding.is_equivalent_to(s, g.ndim):
                return False, f"output {k} has sharding {g.sharding}, asked for {s}"
        # Arrays laid out as in_shardings go straight to the program: no checked call per call.
        placed = [jax.device_put(a, s) for a, s in zip(arrays, ins)]
        checks = checked_calls(lambda: sharded(*placed))
        if checks[0]:
            return False, f"placed inputs took the checked call {checks[0]} times"
        ok3, detail3 = compare(checks[1], want, exact)
        if not ok3:
            return False, f"placed inputs: {detail3}"
        specs = [str(o.spec) if o is not None else None for o in outs]
        return ok, f"{detail}; {kind.name} mesh; out_shardings {specs}"

    operators = _operators()
    for op_name in OPERATORS:
        op = dml.compile_operator(operators[op_name])
        arrays = op_inputs(op_name, op)
        want = jax.jit(op.fn)(*arrays)
        common = (op, arrays, want, op_name not in INEXACT)
        for layout in LAYOUTS:
            base = f"op/{op_name}/{layout_name(layout)}"
            record(f"{base}/jit-fn-explicit-mesh", via_jit_fn, *common, layout, AxisType.Explicit)
            if len(layout) == 1:
                record(f"{base}/jit-fn-auto-mesh", via_jit_fn, *common, layout, AxisType.Auto)
            record(f"{base}/compile-with-shardings", via_compile, *common, layout)

    lap("operators")

    # ---------------------------------------------------------------- reductions
    def reduce_case(fn_name, dtype, axes, layout, values, exact, kind=AxisType.Explicit):
        out_sizes = tuple(1 if d in axes else s for d, s in enumerate(SHAPE))
        desc = dml.ReduceOperatorDesc(fn_name, T(SHAPE, dtype), T(out_sizes, dtype), axes)
        op = dml.compile_operator(desc)
        want = jax.jit(op.fn)(values)
        placed = jax.device_put(values, sharding_for(layout, kind, 4))
        return compare(jax.jit(op.fn)(placed), want, exact, rtol=2e-5, atol=1e-5)

    positive = rng.uniform(0.5, 1.5, SHAPE).astype(np.float32)
    for fn_name in REDUCE_FUNCTIONS:
        record(
            f"reduce/{fn_name}/float32/reduced-axis-sharded",
            lambda f=fn_name: reduce_case(f, "FLOAT32", (1,), (1,), positive, False),
        )
        record(
            f"reduce/{fn_name}/float32/both-reduced-axes-sharded-2d",
            lambda f=fn_name: reduce_case(
                f, "FLOAT32", (2, 3), (2, 3), positive, False, AxisType.Auto
            ),
        )
    ints = rng.integers(-50_000, 50_000, SHAPE).astype(np.int32)  # SUM/MULTIPLY wrap around
    for fn_name in ("SUM", "MULTIPLY", "MIN", "MAX"):
        # Integer wrap-around arithmetic is associative, so any shard order is bit-exact.
        record(
            f"reduce/{fn_name}/int32/reduced-axis-sharded-exact",
            lambda f=fn_name: reduce_case(f, "INT32", (0, 2), (2,), ints, True),
        )

    lap("reductions")

    # ---------------------------------------------------------------- ARGMIN/ARGMAX ties
    def numpy_arg(a, axes, largest, last):
        """Spec reference: row-major linear index over the reduced axes (ascending order)."""
        keep = [d for d in range(a.ndim) if d not in axes]
        moved = np.transpose(a, keep + list(axes))
        flat = moved.reshape(moved.shape[: len(keep)] + (-1,))
        if last:
            flat = flat[..., ::-1]
        # NumPy's argmax/argmin return the first extreme, and treat NaN as the extreme.
        k = np.argmax(flat, axis=-1) if largest else np.argmin(flat, axis=-1)
        if last:
            k = flat.shape[-1] - 1 - k
        return k.reshape([1 if d in axes else s for d, s in enumerate(a.shape)])

    def tie_data(name):
        """(values, axes, layout, mesh kind, expected-extremes note)."""
        if name == "first_across_shards":
            # (2, 16) over 8 devices along axis 1: 2 elements per shard. Row 0's maximum 9 at
            # 3, 4 and 9 (shards 1, 2, 4) and minimum -9 at 6 and 13; row 1 mirrored.
            a = rng.integers(-5, 6, (2, 16)).astype(np.float32)
            a[0, [3, 4, 9]] = 9
            a[0, [6, 13]] = -9
            a[1, [12, 5]] = 9
            a[1, [1, 14, 15]] = -9
            return a, (1,), (1,), AxisType.Explicit
        if name == "nan_across_shards":
            a = rng.standard_normal((2, 16)).astype(np.float32)
            a[0, [5, 12]] = np.nan
            a[1, [0, 15]] = np.nan
            return a, (1,), (1,), AxisType.Auto
        if name == "all_equal":
            return np.full((2, 16), 3.0, np.float32), (1,), (1,), AxisType.Explicit
        if name == "two_axes_2d_mesh":
            # (4, 8) reduced over both axes on the 2x4 mesh: extremes at (2, 0) (device a1,b0)
            # and (1, 7) (device a0,b3). Linear indices 16 and 15: first is 15 although its
            # shard comes later along b.
            a = rng.integers(-5, 6, (4, 8)).astype(np.float32)
            a[2, 0] = a[1, 7] = 9
            a[0, 4] = a[3, 1] = -9
            return a, (0, 1), (0, 1), AxisType.Explicit
        if name == "random_small_ints_1d":
            return rng.integers(0, 3, (8, 32)).astype(np.int32), (1,), (1,), AxisType.Explicit
        if name == "random_small_ints_2d":
            a = rng.integers(0, 3, SHAPE).astype(np.int32)
            return a, (1, 3), (1, 3), AxisType.Explicit
        if name == "reduce_function_argmax":
            a = rng.integers(0, 2, (4, 16)).astype(np.float32)
            return a, (1,), (1,), AxisType.Auto
        raise AssertionError(name)

    def tie_case(name, op_name, direction):
        a, axes, layout, kind = tie_data(name)
        dtype = "FLOAT32" if a.dtype == np.float32 else "INT32"
        out = T(tuple(1 if d in axes else s for d, s in enumerate(a.shape)), "UINT32")
        if name == "reduce_function_argmax":
            if direction == "DECREASING":  # REDUCE has no direction: check it stays first
                return True, "REDUCE has no AxisDirection (covered by INCREASING)"
            desc = dml.ReduceOperatorDesc(op_name, T(a.shape, dtype), out, axes)
        else:
            cls = dml.ArgMinOperatorDesc if op_name == "ARGMIN" else dml.ArgMaxOperatorDesc
            desc = cls(T(a.shape, dtype), out, axes, axis_direction=direction)
        op = dml.compile_operator(desc)
        ref = numpy_arg(a, axes, op_name == "ARGMAX", direction == "DECREASING")
        want = jax.jit(op.fn)(a)
        if not np.array_equal(np.asarray(want), ref):
            return False, f"unsharded run {np.asarray(want).ravel()} != spec {ref.ravel()}"
        got = jax.jit(op.fn)(jax.device_put(a, sharding_for(layout, kind, a.ndim)))
        ok, detail = compare(got, want, True)
        return ok, f"{detail}; indices {np.asarray(got).ravel()[:8].tolist()}"

    for name in TIE_CASES:
        for op_name in ("ARGMIN", "ARGMAX"):
            for direction in ("INCREASING", "DECREASING"):
                record(
                    f"ties/{name}/{op_name}/{direction}",
                    lambda n=name, o=op_name, d=direction: tie_case(n, o, d),
                )

    lap("ties")

    # ---------------------------------------------------------------- a multi-node graph
    def graph_desc():
        n, c, h, w = SHAPE
        clip = dml.ElementWiseClipOperatorDesc(x, x, min=-1.0, max=1.0)
        red = dml.ReduceOperatorDesc("SUM", x, T((n, c, h, 1)), [3])
        join = dml.JoinOperatorDesc([x, x], T((n, 2 * c, h, w)), axis=1)
        return dml.GraphDesc(
            input_count=2,
            output_count=2,
            nodes=[clip, red, join],
            input_edges=[dml.InputGraphEdge(0, 0, 0), dml.InputGraphEdge(1, 2, 1)],
            intermediate_edges=[
                dml.IntermediateGraphEdge(0, 0, 1, 0),
                dml.IntermediateGraphEdge(0, 0, 2, 0),
            ],
            output_edges=[dml.OutputGraphEdge(1, 0, 0), dml.OutputGraphEdge(2, 0, 1)],
        )

    def graph_reference(a, b):
        # Independent of the graph machinery: the same nodes composed by hand.
        clip = np.clip(a, -1.0, 1.0)
        return clip.sum(axis=3, keepdims=True), np.concatenate([clip, b], axis=1)

    if hasattr(dml, "compile_graph"):
        g = dml.compile_graph(graph_desc())
        ga, gb = random_input(x), random_input(x)
        g_want = jax.jit(g.fn)(ga, gb)
        ref_ok, ref_detail = compare(g_want, graph_reference(ga, gb), False)
        for layout in LAYOUTS:
            base = f"graph/clip-reduce-join/{layout_name(layout)}"

            def graph_jit(layout=layout):
                if not ref_ok:
                    return False, f"unsharded graph vs hand-composed NumPy: {ref_detail}"
                placed = [
                    jax.device_put(v, sharding_for(layout, AxisType.Explicit, 4)) for v in (ga, gb)
                ]
                got = jax.jit(g.fn)(*placed)
                ok, detail = compare(got[1], g_want[1], True)  # JOIN output: data movement
                ok2, detail2 = compare(got[0], g_want[0], False)  # the SUM: tolerance
                return ok and ok2, f"{detail}; {detail2}"

            def graph_compile(layout=layout):
                s = sharding_for(layout, AxisType.Auto, 4)
                outs = [fitting_sharding(s, t.sizes) for t in g.output_descs]
                try:
                    sharded = dml.compile_graph(graph_desc(), in_shardings=s, out_shardings=outs)
                except TypeError as e:
                    return False, f"compile_graph does not take shardings: {e}"
                got = sharded(ga, gb)
                ok, detail = compare(got[1], g_want[1], True)
                ok2, detail2 = compare(got[0], g_want[0], False)
                checks, placed = checked_calls(lambda: sharded(*(jax.device_put(a, s)
                                                                 for a in (ga, gb))))  # fmt: skip
                if checks:
                    return False, f"placed inputs took the checked call {checks} times"
                ok3, detail3 = compare(placed[1], g_want[1], True)
                return ok and ok2 and ok3, f"{detail}; {detail2}; placed: {detail3}"

            record(f"{base}/jit-fn-explicit-mesh", graph_jit)
            record(f"{base}/compile-with-shardings", graph_compile)

    lap("graph")

    # ---------------------------------------------------------------- communication
    collective_re = re.compile(r"\s(" + "|".join(hlo.COLLECTIVE_KINDS) + r")(?:-start)?\(")

    def collectives_of(fn, in_s, out_s, arrays):
        text = (
            jax.jit(fn, in_shardings=in_s, out_shardings=out_s).lower(*arrays).compile().as_text()
        )
        return collective_counts(text)

    n = SHAPE[0]
    wide, wide_out = T((n, 32, 8, 8)), T((n, 8, 16, 16))
    comm_ops = {
        "SPLIT-uneven-3+5": operators["SPLIT"],
        "SPLIT-even-8+8": dml.SplitOperatorDesc(T((n, 16, 8, 8)), [x, x], axis=1),
        "JOIN-8+16": operators["JOIN"],
        "TILE-repeats-1x2x1x1": dml.TileOperatorDesc(x, T((n, 16, 8, 8)), [1, 2, 1, 1]),
        "DEPTH_TO_SPACE1-CRD-32ch": dml.DepthToSpace1OperatorDesc(
            wide, wide_out, 2, "COLUMN_ROW_DEPTH"
        ),
        "DEPTH_TO_SPACE1-DCR-32ch": dml.DepthToSpace1OperatorDesc(
            wide, wide_out, 2, "DEPTH_COLUMN_ROW"
        ),
    }
    assert tuple(comm_ops) == COMM_SCENARIOS
    comm_report = []
    for label, desc in comm_ops.items():
        op = dml.compile_operator(desc)
        arrays = [jax.ShapeDtypeStruct(t.sizes, t.dtype) for t in op.input_descs]
        for sharded_axis in (0, 1, 2):  # batch, the operator's axis (channels), rows
            s = sharding_for((sharded_axis,), AxisType.Auto, 4)
            ins = tuple(s for _ in op.input_descs)
            same = tuple(fitting_sharding(s, t.sizes) for t in op.output_descs)
            for out_name, out_s in (("xla-choice", None), ("same-spec-where-divisible", same)):
                # fn returns one array, except SPLIT (always a tuple).
                out_arg = out_s if out_s is None or label.startswith("SPLIT") else out_s[0]
                counts = collectives_of(op.fn, ins, out_arg, arrays)
                comm_report.append(
                    {
                        "scenario": label,
                        "operator": desc.operator_type,
                        "sharded_axis": sharded_axis,
                        "input_sizes": [list(t.sizes) for t in op.input_descs],
                        "output_sizes": [list(t.sizes) for t in op.output_descs],
                        "out_shardings": out_name
                        if out_s is None
                        else [
                            str(o.spec) if o is not None else "None (XLA's choice)" for o in out_s
                        ],
                        "collectives": counts,
                    }
                )

        def no_comm(label=label, axes=(0, 2)):
            # Batch or rows sharded: every output element is computed from local data.
            rows = [r for r in comm_report if r["scenario"] == label and r["sharded_axis"] in axes]
            bad = [r for r in rows if r["collectives"]]
            ok = len(rows) == 2 * len(axes) and not bad
            return ok, f"axes {axes} sharded: {[r['collectives'] for r in rows]}"

        record(f"comm/{label}/batch-or-rows-sharded-no-collectives", no_comm)
        if label == "DEPTH_TO_SPACE1-CRD-32ch":
            # CRD reads channel c' * b * b + (row, col): each device's channel block holds
            # whole output channels, so channel sharding stays local as well.
            record(f"comm/{label}/channels-sharded-no-collectives", lambda f=no_comm: f(axes=(1,)))

    lap("communication")

    # ---------------------------------------------------------------- whole networks
    record_networks(record, compare, collective_re)
    lap("networks")
    print(
        json.dumps(
            {
                "cases": results,
                "section_seconds": sections,
                "collectives": comm_report,
                "seconds": round(time.perf_counter() - started, 2),
                "jax": jax.__version__,
                "devices": [str(d) for d in jax.devices()],
            }
        )
    )


def record_networks(record, compare, collective_re) -> None:
    """ResNet data-parallel and the GPT stack tensor-parallel, each against its unsharded run;
    and the network benchmark's scaling mode on 2 of the devices."""
    import sys
    import tempfile
    from pathlib import Path

    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from dml_jax.hlo import optimized_hlo

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "examples"))
    import networks

    def sharded_run(net, mesh, data_axis, model_axis, out_spec):
        x = net.example_data()["x"]
        want = np.asarray(net.compile()(*net.arguments(x=x)))
        ins = networks.shardings(net, mesh, data_axis, model_axis)
        g = net.compile(in_shardings=ins, out_shardings=NamedSharding(mesh, out_spec))
        values = [jax.device_put(a, s) for a, s in zip(net.arguments(x=x), ins)]
        got = g(*values)
        text = optimized_hlo(g, *values)  # the program the call runs
        collectives = [
            (m.group(1), line.split("=")[1].split()[0])  # (kind, result shape)
            for line in text.splitlines()
            for m in [collective_re.search(line)]
            if m and "=" in line
        ]
        ok, detail = compare(got, want, False, rtol=1e-4, atol=1e-5)
        return ok, detail, got, collectives

    def resnet_data_parallel():
        net = networks.resnet50(8, **networks.SMALL_RESNET)
        mesh = jax.make_mesh((8,), ("x",))
        ok, detail, got, collectives = sharded_run(net, mesh, "x", None, P("x"))
        # Inference on one image at a time needs no communication at all.
        ok = ok and not collectives and got.sharding.spec == P("x")
        return ok, f"{detail}; collectives {collectives}; output {got.sharding.spec}"

    # 2 x 8 = 16 tokens (and 4 x 256 = 1,024 below): no weight has that many rows or columns.
    small_gpt = {"seq": 8, "d_model": 64, "heads": 8, "layers": 2}

    def weight_free(net, collectives):
        # A collective whose result has a weight's dimensions (in any order: XLA may move a
        # weight transposed) moves a weight; no weight has as many rows as the activations.
        def dims(text):
            inside = text.split("[", 1)[1].split("]", 1)[0]
            return tuple(sorted(int(n) for n in inside.split(",") if n))

        shapes = {tuple(sorted(v.shape)) for v in net.weights.values()}
        moved = [c for c in collectives if dims(c[1]) in shapes]
        return not moved, moved

    def gpt_tensor_parallel(config=small_gpt, batch=2):
        net = networks.gpt_stack(batch, dtype="FLOAT32", **config)
        mesh = jax.make_mesh((8,), ("x",))
        ok, detail, _, collectives = sharded_run(net, mesh, None, "x", P())
        # Megatron's minimum: the row-parallel products' partial sums all-reduced, one after
        # attention and one after the MLP, each of the layer's activations ([tokens, d_model]);
        # nothing else moves (no weight gathered, no activation gathered between them).
        tokens, d = batch * config["seq"], config["d_model"]
        minimum = [("all-reduce", f"f32[{tokens},{d}]")] * (2 * config["layers"])
        got_list = [(kind, shape.split("{")[0]) for kind, shape in collectives]
        clean, moved = weight_free(net, collectives)
        ok = ok and got_list == minimum and clean
        return ok, f"{detail}; collectives {collectives}; Megatron's {minimum}; weights {moved}"

    def gpt_data_and_tensor():
        net = networks.gpt_stack(2, dtype="FLOAT32", **small_gpt)
        mesh = jax.make_mesh((2, 4), ("a", "b"))
        ok, detail, got, collectives = sharded_run(net, mesh, "a", "b", P("a"))
        clean, moved = weight_free(net, collectives)
        ok = ok and clean and got.sharding.spec == P("a")
        return ok, f"{detail}; output {got.sharding.spec}; weights moved {moved}"

    def benchmark_two_devices():
        from dml_jax import bench

        with tempfile.TemporaryDirectory() as tmp:
            status = bench.main(
                ["--suite", "networks", "--quick", "--devices", "2", "--out", tmp,
                 "--sample-s", "0.001", "--samples", "1"]
            )  # fmt: skip
            rows = json.loads(Path(tmp, "networks.json").read_text())["rows"]
        bad = [r for r in rows if "hot_s" not in r or r.get("max_rel_err_vs_1_device", 0) > 1e-2]
        scaled = [r for r in rows if r["devices"] == 2]
        ok = status == 0 and not bad and len(rows) == 6
        ok = ok and all("speedup_vs_1_device" in r for r in scaled)
        # GPT split sequence-parallel too: its tokens (and output rows) left split
        sp = [r for r in rows if r["layout"].endswith("sequence-parallel")]
        ok = ok and [r["output_sharding"] for r in sp] == ["P('x', None)"]
        # each split row reports what its program communicates: data parallelism nothing, the
        # tensor-parallel GPT Megatron's two all-reduces a layer of its [tokens, d_model]
        # float16 activations (2 layers, 2 x 8 tokens, d_model 32)
        comm = {r["layout"]: r.get("collectives") for r in scaled}
        tp = {"all-reduce": {"count": 4, "bytes": 4 * 16 * 32 * 2}}
        ok = ok and [comm[k] for k in sorted(comm) if "data-parallel" in k] == [{}, {}]
        ok = ok and comm.get("2 devices, tensor-parallel") == tp
        return ok, f"{len(rows)} rows; bad {bad}; sequence-parallel {sp}; collectives {comm}"

    record("network/resnet-small/data-parallel-x8", resnet_data_parallel)
    record("network/gpt-small/tensor-parallel-x8", gpt_tensor_parallel)
    # 1,024 tokens, more than any weight's rows or columns: the graph's output layout must be
    # the requested one (replicated), or propagation gathers the weights instead.
    long_gpt = {"seq": 256, "d_model": 64, "heads": 8, "layers": 1}
    record("network/gpt-long/tensor-parallel-x8", gpt_tensor_parallel, long_gpt, 4)
    record("network/gpt-small/data-a2-tensor-b4", gpt_data_and_tensor)
    record("network/benchmark-quick/2-devices", benchmark_two_devices)


def leaves_arrays(r):
    return list(r) if isinstance(r, tuple) else [r]


if __name__ == "__main__":
    main()
