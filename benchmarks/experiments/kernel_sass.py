"""The sm_90a SASS of the 4-bit weight kernel (``dml_jax/kernels/int4_gemm.py``), made on any
machine: the product lowered for CUDA by Pallas (``lowering_platforms=("cuda",)``), the Triton IR
it carries compiled by the ``triton`` package (its CUDA backend, ptxas) and disassembled by the
package's nvdisasm. Per tile set: instructions a thread, registers (``cuobjdump
--dump-resource-usage``), the most frequent opcodes and the shared-memory stores, barriers and
global loads that say where a program waits.

The Triton of the ``triton`` package is not the one jaxlib carries (3.8 here against the GPU
machine's jaxlib), so the code can differ from what runs there; what it is good for is comparing
tile sets and forms with each other, not absolute counts.

Usage: ``PYTHONPATH=. python benchmarks/experiments/kernel_sass.py [--shapes 2048x16384 ...]
[--tiles "" natural_k=1 "weights_first=0,natural_k=1"] [--keep DIR]`` (shapes K x N, the
1B-class decoder's by default; a tile set: ``Tiles`` fields, comma-separated, ints as
booleans where the field is one; ``--keep`` writes each set's TTGIR, PTX and SASS there).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import tempfile

import jax
import jax.numpy as jnp

from dml_jax import fastpath
from dml_jax.kernels import int4_gemm as K

SHAPES = ("2048x3072", "2048x2048", "2048x16384", "8192x2048", "2048x128256")
BLOCK = 32
WATCHED = ("STS", "LDS", "LDSM", "LDG", "BAR", "PRMT", "LOP3", "HGMMA", "HMMA", "HMUL2", "HADD2")


def tiles_of(text: str) -> K.Tiles:
    """``Tiles`` from ``field=value,...`` ('' the defaults)."""
    fields = {f.name: f.type for f in K.Tiles.__dataclass_fields__.values()}
    kw = {}
    for item in filter(None, text.split(",")):
        name, value = item.split("=")
        kw[name] = bool(int(value)) if fields[name] in (bool, "bool") else int(value)
    return K.Tiles(**kw)


def triton_ir(k: int, n: int, tiles: K.Tiles) -> tuple[bytes, int, int]:
    """(the Triton IR's bytecode, num_warps, num_stages) of the product of one row by K x N
    4-bit weights (zero points, blocks of 32), lowered for CUDA."""
    a = jax.ShapeDtypeStruct((1, k), jnp.float16)
    q = jax.ShapeDtypeStruct((n, k // 2), jnp.uint8)
    s = jax.ShapeDtypeStruct((n, k // BLOCK), jnp.float16)
    z = jax.ShapeDtypeStruct((n, k // BLOCK), jnp.uint4)

    def product(a, q, s, z):
        return K.int4_product(a, q, s, z, tiles=tiles)

    with fastpath.target_platform("cuda"):
        text = jax.jit(product).trace(a, q, s, z).lower(lowering_platforms=("cuda",)).as_text()
    # the one Triton call's backend config: its IR, a quoted string (whose escaped bytes may
    # hold any other text, so it is matched first, and the numbers searched outside it)
    (escaped,) = re.findall(r'ir = "((?:[^"\\]|\\.)*)"', text, re.DOTALL)
    rest = text.replace(escaped, "")
    return (
        _unescaped(escaped),
        int(re.search(r"num_warps = (\d+)", rest).group(1)),
        int(re.search(r"num_stages = (\d+)", rest).group(1)),
    )


def _unescaped(text: str) -> bytes:
    """An MLIR string attribute's bytes (``\\XX`` hex escapes, ``\\"``, ``\\\\``)."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] != "\\":
            out += text[i].encode("latin1")
            i += 1
        elif text[i + 1] in '"\\':
            out.append(ord(text[i + 1]))
            i += 2
        else:
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
    return bytes(out)


def compiled(ir: bytes, warps: int, stages: int, folder: str) -> dict:
    """The IR compiled for sm_90a: {ttgir, ptx, sass, registers}."""
    import triton
    from triton._C.libtriton import ir as tir
    from triton.backends.compiler import GPUTarget, Language
    from triton.backends.nvidia.compiler import CUDABackend

    path = os.path.join(folder, "kernel.ttir.bc")
    with open(path, "wb") as f:
        f.write(ir)
    backend = CUDABackend(GPUTarget("cuda", 90, 32))
    options = backend.parse_options({"num_warps": warps, "num_stages": stages})
    context = tir.context()
    tir.load_dialects(context)
    backend.load_dialects(context)
    stages_: dict = {}
    backend.add_stages(stages_, options, Language.TRITON)
    src, metadata, out = tir.parse_mlir_module(path, context), {}, {}
    src.context = context
    for name in ("ttir", "ttgir", "llir", "ptx", "cubin"):
        src = stages_[name](src, metadata)
        if name in ("ttgir", "ptx"):
            out[name] = str(src)
    cubin = os.path.join(folder, "kernel.cubin")
    with open(cubin, "wb") as f:
        f.write(src)
    tools = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    run = subprocess.run
    out["sass"] = run([os.path.join(tools, "nvdisasm"), "-c", cubin], capture_output=True,
                      text=True, check=True).stdout  # fmt: skip
    usage = run([os.path.join(tools, "cuobjdump"), "--dump-resource-usage", cubin],
                capture_output=True, text=True, check=True).stdout  # fmt: skip
    out["registers"] = int(re.search(r"REG:(\d+)", usage).group(1))
    return out


def opcodes(sass: str) -> collections.Counter:
    """Each instruction's opcode (its predicate and modifiers dropped), counted."""
    counts: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", line)
        if m:
            counts[m.group(1)] += 1
    return counts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), help="K x N")
    p.add_argument("--tiles", nargs="*", default=[""], help="Tiles fields: 'natural_k=1,...'")
    p.add_argument("--keep", default=None, help="a folder for each set's TTGIR, PTX and SASS")
    a = p.parse_args()
    for shape in a.shapes:
        k, n = map(int, shape.split("x"))
        for text in a.tiles:
            tiles = tiles_of(text)
            view = K.plan(1, n, k, BLOCK, tiles)
            with tempfile.TemporaryDirectory() as folder:
                out = compiled(*triton_ir(k, n, tiles), folder)
            counts = opcodes(out["sass"])
            watched = " ".join(f"{o} {counts[o]}" for o in WATCHED if counts[o])
            print(f"{shape} [{text or 'defaults'}] grid {n // view.block_n}x{view.splits}, "
                  f"K/program {view.k_per_program}, step {view.step}: "
                  f"{sum(counts.values())} instructions a thread, {out['registers']} registers; "
                  f"{watched}", flush=True)  # fmt: skip
            if a.keep:
                name = f"{shape}-{text or 'defaults'}".replace(",", "_").replace("=", "")
                os.makedirs(a.keep, exist_ok=True)
                for part in ("ttgir", "ptx", "sass"):
                    with open(os.path.join(a.keep, f"{name}.{part}"), "w") as f:
                        f.write(out[part])


if __name__ == "__main__":
    main()
