"""Static statistics of the CUDA kernels that bench cases run, read on any machine (no GPU).

Each bench case whose name matches ``--only`` is lowered for CUDA here: fast paths are taken as
on a CUDA machine (the lowering picks the CUDA branch of each ``lax.platform_dependent``), every
Pallas (Triton) kernel in the program is compiled for sm_90a by Triton and ptxas, and its
registers, stack (spilled) bytes and SASS instruction counts are printed: the total and the
shuffles, barriers, shared-memory and global loads among them. A first pass for a kernel sweep
when device time is short: variants that spill or grow in instructions need no timing run.
Counts are per program (loops counted once; the kernels here are mostly unrolled).

Triton is not a dependency of the project: install the GPU machine's version apart, e.g.
``pip install --target DIR triton==3.6.0``, and pass ``--triton DIR``. Example:

    python benchmarks/kernel_sass.py --triton DIR --dtypes float32,float16 --only "TOP_K"
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

import jax

from dml_jax import bench, fastpath
from dml_jax import compile as compiled

_COMPILE = r"""
import sys
sys.path.insert(0, sys.argv[4])
import triton
from triton.backends.compiler import GPUTarget
kernel = triton.compile(sys.argv[1], target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": int(sys.argv[2]), "num_stages": int(sys.argv[3])})
open(sys.argv[1] + ".cubin", "wb").write(kernel.asm["cubin"])
"""


@contextlib.contextmanager
def as_cuda():
    """Fast paths chosen as on a CUDA machine (compile_operator consults ``cuda_present``); the
    operators compiled meanwhile leave compile_operator's cache with it."""
    saved = fastpath.cuda_present
    fastpath.cuda_present = lambda: True
    compiled._compile_cached.cache_clear()
    try:
        yield
    finally:
        fastpath.cuda_present = saved
        compiled._compile_cached.cache_clear()


def triton_kernels(fn, *specs) -> list[dict]:
    """The Triton kernels of ``jax.jit(fn)`` lowered for CUDA: ``name``, ``ir`` (Triton IR as
    text), ``num_warps`` and ``num_stages`` for each, in program order. Compile ``fn``'s
    operator inside ``as_cuda()``."""
    from jax._src.lib.mlir import ir
    from jax._src.lib.triton import dialect as tt_dialect

    with as_cuda():
        lowered = jax.jit(fn).trace(*specs).lower(lowering_platforms=("cuda",))
    module = lowered.compiler_ir("stablehlo")
    configs = []

    def walk(op):
        for region in op.regions:
            for block in region.blocks:
                for inner in block.operations:
                    if inner.operation.name == "stablehlo.custom_call":
                        target = ir.StringAttr(inner.attributes["call_target_name"]).value
                        if "triton" in target:
                            configs.append(inner.attributes["mhlo.backend_config"])
                    walk(inner.operation)

    walk(module.operation)
    kernels = []
    for config in configs:
        context = ir.Context()
        tt_dialect.register_dialect(context)
        context.allow_unregistered_dialects = True  # gpu.barrier: printed as is, Triton reads it
        with context:
            text = ir.Module.parse(ir.StringAttr(config["ir"]).value_bytes).operation.get_asm()
        # jaxlib's gpu.barrier prints a properties slot that Triton's parser refuses
        text = re.sub(r'(?m)^(\s*)"gpu\.barrier"\(\).*$', r"\1gpu.barrier", text)
        kernels.append(
            dict(
                name=ir.StringAttr(config["name"]).value,
                ir=text,
                num_warps=ir.IntegerAttr(config["num_warps"]).value,
                num_stages=ir.IntegerAttr(config["num_stages"]).value,
            )
        )
    return kernels


def sass_stats(kernel: dict, triton_dir: str) -> dict:
    """Registers, stack bytes and SASS instruction counts of one kernel of ``triton_kernels``,
    compiled for sm_90a by the Triton in ``triton_dir`` (in a subprocess: Triton's MLIR and
    jaxlib's do not share a process)."""
    folder = tempfile.mkdtemp()
    path = os.path.join(folder, "kernel.ttir")
    with open(path, "w") as f:
        f.write(kernel["ir"])
    script = os.path.join(folder, "compile.py")
    with open(script, "w") as f:
        f.write(_COMPILE)
    args = [path, str(kernel["num_warps"]), str(kernel["num_stages"]), triton_dir]
    run = subprocess.run(
        [sys.executable, script, *args], check=False, capture_output=True, text=True
    )
    if run.returncode:
        return {"error": run.stderr.strip().splitlines()[-1][:300]}
    tool = os.path.join(triton_dir, "triton/backends/nvidia/bin/cuobjdump")

    def dump(flag):
        return subprocess.run(
            [tool, flag, path + ".cubin"], check=True, capture_output=True, text=True
        ).stdout

    usage = dump("--dump-resource-usage")
    ops = collections.Counter()
    for line in dump("--dump-sass").splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m:
            ops[m.group(1)] += 1
    return dict(
        cubin=path + ".cubin",  # kept: ``cuobjdump --dump-sass`` reads the whole program
        registers=int(re.search(r"REG:(\d+)", usage).group(1)),
        stack=int(re.search(r"STACK:(\d+)", usage).group(1)),
        instructions=sum(ops.values()),
        shuffles=ops["SHFL"],
        barriers=ops["BAR"],
        shared_loads=ops["LDS"],
        shared_stores=ops["STS"],
        global_loads=ops["LDG"],
        most=ops.most_common(6),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton", help="folder holding the triton package (pip --target)")
    parser.add_argument("--dtypes", default="float32")
    parser.add_argument("--only", default="", help="regular expression on the case names")
    parser.add_argument("--ir", action="store_true", help="print the Triton IR too")
    parser.add_argument("--out", help="JSON file for the rows")
    args = parser.parse_args(argv)
    cases = bench.build_cases(bench.GIB_SHAPE_F32, args.dtypes.split(","), full=True)
    rows = []
    for case in cases:
        if case.make_dml is None or not re.search(args.only, case.name):
            continue
        specs = [jax.ShapeDtypeStruct(s, d) for s, d in zip(case.shapes, case.dtypes)]
        try:
            with as_cuda():
                operator = case.make_dml()
            kernels = triton_kernels(getattr(operator, "fn", operator), *specs)
        except Exception as e:  # a case that does not lower is reported, not fatal
            print(json.dumps(dict(case=case.name, dtype=case.dtype, error=str(e)[:300])))
            continue
        for kernel in kernels:
            row = dict(case=case.name, dtype=case.dtype, kernel=kernel["name"])
            row.update(num_warps=kernel["num_warps"], num_stages=kernel["num_stages"])
            if args.triton:
                stats = sass_stats(kernel, args.triton)
                stats.pop("cubin", None)  # a temporary path: kept for callers, not the report
                row.update(stats)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.ir:
                print(kernel["ir"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
