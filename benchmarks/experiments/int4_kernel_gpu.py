"""The 4-bit weight GEMM kernel (``dml_jax/kernels/int4_gemm.py``) on a GPU, for issue
"generation", item 5: a decode step's products of block-quantized 4-bit weights (MatMulNBits's
DEQUANTIZE -> GEMM) read as 4 bits.

For x [M, K] float16 times weights of {K, N} (blocks of 32 along K, float16 scales, 4-bit zero
points), several weights a program (up to 16, at most 1 GiB of float16 weights), M = 1, 2, 8:

- ``f16``: the float16 export's product, GEMM's lax lowering of x [M, K] by W [K, N] float16,
  traced for CUDA with the sessions' XLA options (cuBLAS; ``--triton`` adds XLA's default);
- ``deq+gemm``: the lowering without the kernel, DEQUANTIZE of the ``jnp.uint4`` codes then the
  GEMM, the way a MatMulNBits model ran before the kernel;
- ``int4[tiles]``: the kernel, with its default tunables (``TILES["default"]``) at every M and
  the other ``TILES`` at M = 1 (``--all-tiles``: at every M); ``row...`` is the one-row form
  (``Tiles.one_row``: sums of products on the vector units, A read as its one row), which
  applies at M = 1 only, as ``widen...`` (``Tiles.widen_row``: A read as its one row and
  widened to 16 in registers, no pad); ``ahead1`` loads a step ahead (``Tiles.ahead``).
  The default reads the codes as bytes, split by PTX (``Tiles.bytes_form``), unrolled, as
  ``bytes...`` do, and ``loop...`` as a loop Triton pipelines (``Tiles.loop``): those are given
  the codes' bytes, as a session passes its held 4-bit weights; ``codes`` and the older tiles
  (``CODES``) read them as 4-bit values; ``atomic...`` add K's splits atomically
  (``Tiles.atomic``). A line times the view of uint4 codes as bytes (a bitcast) alone, what a
  program given the codes as uint4 would add.

Each line: microseconds a call of the program divided by the weights, GB/s of float16-equivalent
weights (2 bytes a weight, whatever is read), the ratio to ``f16``'s time, and for the kernel
its largest difference from ``deq+gemm`` over the first weight's product, relative to that
product's largest value (float16 rounding and summation order: ~1e-3; ``BAD`` above 2^-8).
Then the whole tiny LLaMA decoder step of tests/data/decoders, its MatMul weights quantized
here to MatMulNBits (4 bits, blocks of 32, zero points): greedy tokens through the
``Generator`` with the kernel and with the fast paths off, tokens/s and whether they agree.

Usage (the GPU machine, repository root): ``PYTHONPATH=. python3
benchmarks/experiments/int4_kernel_gpu.py`` (meant to take under 3 minutes; ``--shapes
2048x2048`` a subset, ``--no-model`` without the tiny model).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import dml_jax as dml
from dml_jax import fastpath, registry
from dml_jax.kernels import int4_gemm as K
from dml_jax.onnx.program import GPU_COMPILER_OPTIONS

# (K, N): the 1B-class LLaMA's products at batch 1 (q, k and v joined, o, gate and up joined,
# down, the head)
SHAPES = ((2048, 3072), (2048, 2048), (2048, 16384), (8192, 2048), (2048, 128256))
ROWS = (1, 2, 8)
BLOCK = 32
BUDGET = 1 << 30  # float16 bytes of weights a program at most
# the codes read as 4-bit values (``Tiles.bytes_form`` off): the form every tile below but the
# loops, the bytes forms and the one-row form took before the bytes form became the default
CODES = dict(bytes_form=False)
# the one-row form narrowed to ROW_PROGRAMS programs, K whole up to 8192 (one kernel a product)
NARROW = dict(max_k=8192)
# the one-row form at any size (``ROW_MAX_WEIGHTS`` off), programs not narrowed
WIDE = dict(row_max_weights=1 << 40, row_programs=1)
ANY_SIZE = dict(row_max_weights=1 << 40)
TILES = {
    "default": K.Tiles(),
    "codes": K.Tiles(**CODES),  # the default tiles with the codes read as 4-bit values
    "n128w8": K.Tiles(block_n=128, warps=8, **CODES),
    "a-first": K.Tiles(weights_first=False, **CODES),
    "halfgrid": K.Tiles(target_programs=128, min_k=512, **CODES),
    "grid512": K.Tiles(target_programs=512, min_k=128, **CODES),
    "row": K.Tiles(one_row=True),
    "row-n128w8": K.Tiles(one_row=True, block_n=128, warps=8),
    "row-n32w2": K.Tiles(one_row=True, block_n=32, warps=2),
    "row-grid512": K.Tiles(one_row=True, target_programs=512, min_k=128),
    "row-step512": K.Tiles(one_row=True, step_k=512),
    "row-narrow": K.Tiles(one_row=True, **NARROW),
    "row-narrow-w1": K.Tiles(one_row=True, warps=1, **NARROW),
    "row-narrow-w2": K.Tiles(one_row=True, warps=2, **NARROW),
    "row-narrow-t256": K.Tiles(one_row=True, row_programs=256, **NARROW),
    "row-narrow-s128": K.Tiles(one_row=True, step_k=128, **NARROW),
    "widen": K.Tiles(widen_row=True, **CODES),
    "widen-grid512": K.Tiles(widen_row=True, target_programs=512, min_k=128, **CODES),
    "widen-ahead1": K.Tiles(widen_row=True, ahead=1, **CODES),
    "widen-n128w8": K.Tiles(widen_row=True, block_n=128, warps=8, **CODES),
    # every load of a program first (246 registers, no spill in the sm_90a SASS at 32 columns)
    "widen-n32-all": K.Tiles(widen_row=True, block_n=32, ahead=64, **CODES),
    "widen-n32-a3": K.Tiles(widen_row=True, block_n=32, ahead=3, **CODES),
    "ahead1": K.Tiles(ahead=1, **CODES),
    "widen-a2": K.Tiles(widen_row=True, ahead=2, **CODES),
    "widen-w8": K.Tiles(widen_row=True, warps=8, **CODES),
    "widen-n32w2": K.Tiles(widen_row=True, block_n=32, warps=2, **CODES),
    # the one-row form at every size, its float32 sums {BLOCK_N, STEP_K} small (at steps of 256
    # they took 128 registers a thread of 64 columns on 4 warps)
    "row-s64": K.Tiles(one_row=True, step_k=64, **WIDE),
    "row-s64-n32": K.Tiles(one_row=True, step_k=64, block_n=32, **WIDE),
    "row-s64-n32w2": K.Tiles(one_row=True, step_k=64, block_n=32, warps=2, **WIDE),
    "row-s32": K.Tiles(one_row=True, step_k=32, **WIDE),
    "row-s64-w8": K.Tiles(one_row=True, step_k=64, warps=8, **WIDE),
    "row-s64-p512": K.Tiles(one_row=True, step_k=64, row_max_weights=1 << 40, row_programs=512),
    # the steps as a loop that Triton pipelines (LOOP: its sm_90a SASS loads the codes by
    # cp.async into shared memory, STAGES steps ahead), the codes read as bytes; it wants
    # several steps a program, so fewer programs of more values of K
    "loop": K.Tiles(loop=True, target_programs=256, min_k=512),
    "loop-k1024": K.Tiles(loop=True, target_programs=256, min_k=1024),
    "loop-k2048": K.Tiles(loop=True, target_programs=132, min_k=2048),
    "loop-s2": K.Tiles(loop=True, target_programs=256, min_k=1024, stages=2),
    "loop-s4": K.Tiles(loop=True, target_programs=256, min_k=1024, stages=4),
    "loop-n128w8": K.Tiles(loop=True, block_n=128, warps=8, target_programs=132, min_k=1024),
    "loop-step128": K.Tiles(loop=True, step_k=128, target_programs=256, min_k=1024),
    "loop-p512": K.Tiles(loop=True, target_programs=512, min_k=512),
    # unrolled, the codes read as bytes and split by PTX (``Tiles.bytes_form``, the default)
    "bytes-grid256": K.Tiles(bytes_form=True, target_programs=256, min_k=256),
    "bytes-n128w8": K.Tiles(bytes_form=True, block_n=128, warps=8),
    # A's even and odd values as one widened operand that both of a step's dots read: one
    # shared-memory store of it a step, not two (``Tiles.paired_rows``)
    "paired": K.Tiles(paired_rows=True),
    "paired-n128w8": K.Tiles(paired_rows=True, block_n=128, warps=8),
    # for the head (2048 x 128,256: 2,004 programs of the whole of K, 3.8 waves of four a
    # multiprocessor; int4_floor_gpu.py put it at 70-77 us against a read of its codes in 39):
    # steps of 128 (95 registers in the CPU-made SASS: five programs a multiprocessor), K split
    # in two (4,008 programs of 1,024, the halves added by XLA)
    "s128": K.Tiles(step_k=128),
    "k-halves": K.Tiles(target_programs=4096, min_k=1024),
    # K's splits added atomically into one float32 product: no reduction kernel after it
    "atomic": K.Tiles(atomic=True),
    "atomic-grid1024": K.Tiles(atomic=True, target_programs=1024, min_k=128),
    # no split of K at the 1B decoder's shapes (the defaults split K 16 ways for q/k/v, o and
    # down, 2 for gate and up: a reduction kernel after each), programs of few columns
    # instead: 192 / 128 / 1,024 / 128 programs of 16 columns, each the whole of K
    "n16": K.Tiles(block_n=16, target_programs=128, max_k=8192),
    "n16-w2": K.Tiles(block_n=16, warps=2, target_programs=128, max_k=8192),
    "n16-loop": K.Tiles(block_n=16, target_programs=128, max_k=8192, loop=True),
    "n32-t64": K.Tiles(block_n=32, target_programs=64, max_k=8192),
    # the one-row form on the codes' bytes (split by PTX, as the default; the row tiles above
    # read 4-bit codes before 2026-11-28) at every size, narrowed to so many programs before K
    # is split
    "row-all-p256": K.Tiles(one_row=True, **ANY_SIZE, row_programs=256),
    "row-all-p512": K.Tiles(one_row=True, **ANY_SIZE, row_programs=512),
    "row-all-p512-w2": K.Tiles(one_row=True, **ANY_SIZE, row_programs=512, warps=2),
    "row-all-p1024-s128": K.Tiles(one_row=True, **ANY_SIZE, row_programs=1024, step_k=128),
    # the bytes form with each step's loads issued a step (or every step) before its products
    # (in the sm_90a SASS without it, a step's codes are loaded only after the step before has
    # taken its products: 8 KB a program in flight, then none while it computes)
    "bytes-a1": K.Tiles(ahead=1),
    "bytes-all": K.Tiles(ahead=64),
    "bytes-a1-n32": K.Tiles(ahead=1, block_n=32, target_programs=1024),
    "bytes-all-k512": K.Tiles(ahead=64, min_k=512, target_programs=256),
    # each byte's codes joined into K's order: one dot a step by A's contiguous values
    # (``Tiles.natural_k``), with the weights first (wgmma) or A first (mma.sync, 96 registers)
    "natural": K.Tiles(natural_k=True),
    "natural-a-first": K.Tiles(natural_k=True, weights_first=False),
}
T = dml.TensorDesc


def timed(fn, *args, seconds=0.15):
    """Seconds a call: the median of 3 samples of as many calls as fill ``seconds``."""
    jax.block_until_ready(fn(*args))
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    reps = int(np.clip(seconds / 3 / max(time.perf_counter() - t, 1e-6), 3, 200))
    samples = []
    for _ in range(3):
        t = time.perf_counter()
        for _ in range(reps):
            out = fn(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t) / reps)
    return float(np.median(samples))


def on_cuda(fn, options=None):
    """``fn`` jitted and traced for CUDA alone (as a session's programs are)."""

    def traced(*args):
        with fastpath.target_platform("cuda"):
            return fn(*args)

    return jax.jit(traced, compiler_options=GPU_COMPILER_OPTIONS if options is None else options)


def gemm_lax(x, w, m, k, n, trans_b):
    """GEMM's lax lowering of x [M, K] by w ({N, K} with TransB, else {K, N})."""
    ft = T("FLOAT16", (1, 1, m, k))
    b = T("FLOAT16", (1, 1, n, k) if trans_b else (1, 1, k, n))
    d = dml.GemmOperatorDesc(ft, b, None, T("FLOAT16", (1, 1, m, n)),
                             trans_b="TRANSPOSE" if trans_b else "NONE")  # fmt: skip
    y = registry.lookup(d.operator_type).lower(d, x.reshape(1, 1, m, k), w.reshape(b.sizes))[0]
    return y.reshape(m, n)


def dequantize_lax(q, s, z):
    """DEQUANTIZE's lax lowering of codes {N, K} by {N, K / BLOCK} scales and zero points."""
    (n, k), blocks = q.shape, s.shape[1]
    params = [T("FLOAT16", (n, blocks)), T("UINT4", (n, blocks))]
    d = dml.DequantizeOperatorDesc(T("UINT4", (n, k)), "SCALE_ZERO_POINT", params,
                                   T("FLOAT16", (n, k)))  # fmt: skip
    return registry.lookup(d.operator_type).lower(d, q, s, z)[0]


def products(args) -> None:
    for k, n in args.shapes:
        count = int(max(1, min(16, BUDGET // (k * n * 2))))
        key = jax.random.key(k * 7 + n)
        keys = jax.random.split(key, 4 * count)
        codes = [jax.random.randint(keys[i], (n, k), 0, 16, jnp.uint8).astype(jnp.uint4)
                 for i in range(count)]  # fmt: skip
        packed = [jax.lax.bitcast_convert_type(q.reshape(n, k // 2, 2), jnp.uint8)
                  for q in codes]  # fmt: skip
        scales = [jax.random.uniform(keys[count + i], (n, k // BLOCK), jnp.float16, 0.005, 0.02)
                  for i in range(count)]  # fmt: skip
        zeros = [jax.random.randint(keys[2 * count + i], (n, k // BLOCK), 0, 16, jnp.uint8)
                 .astype(jnp.uint4) for i in range(count)]  # fmt: skip
        w16 = [(jax.random.normal(keys[3 * count + i], (k, n), jnp.float16) * 0.02)
               for i in range(count)]  # fmt: skip
        nbytes = count * k * n * 2
        for m in args.rows:
            x = jax.random.normal(jax.random.key(m), (m, k), jnp.float16)

            def f16(x, ws, m=m):
                return [gemm_lax(x, w, m, k, n, False) for w in ws]

            def pair(x, qs, ss, zs, m=m):
                return [gemm_lax(x, dequantize_lax(q, s, z), m, k, n, True)
                        for q, s, z in zip(qs, ss, zs)]  # fmt: skip

            tag = f"K{k} N{n} M{m} x{count}"
            base = timed(on_cuda(f16), x, w16)
            print(f"{tag} f16: {base / count * 1e6:8.1f} us {nbytes / base / 1e9:6.0f} GB/s",
                  flush=True)  # fmt: skip
            if args.triton:
                t = timed(on_cuda(f16, {}), x, w16)
                print(f"{tag} f16/xla-default: {t / count * 1e6:8.1f} us "
                      f"{nbytes / t / 1e9:6.0f} GB/s x{base / t:5.2f}", flush=True)  # fmt: skip
            if m == args.rows[0]:  # what the loop's view of the codes as bytes costs alone
                bytes_of = on_cuda(lambda qs: [jax.lax.bitcast_convert_type(
                    q.reshape(n, k // 2, 2), jnp.uint8) for q in qs])  # fmt: skip
                t = timed(bytes_of, codes)
                print(f"{tag} codes as bytes (bitcast alone): {t / count * 1e6:8.1f} us",
                      flush=True)  # fmt: skip
            lax_pair = on_cuda(pair)
            ref = np.asarray(lax_pair(x, codes[:1], scales[:1], zeros[:1])[0], np.float32)
            t = timed(lax_pair, x, codes, scales, zeros)
            print(f"{tag} deq+gemm: {t / count * 1e6:8.1f} us {nbytes / t / 1e9:6.0f} "
                  f"GB/s-f16eq x{base / t:5.2f}", flush=True)  # fmt: skip
            for name, tile in TILES.items():
                if name != "default" and m != 1 and not args.all_tiles:
                    continue
                if args.tiles and name not in args.tiles:
                    continue
                v = K.plan(m, n, k, BLOCK, tile)
                qs = packed if v.bytes_form else codes

                def kernel(x, qs, ss, zs, tile=tile):
                    return [K.int4_product(x, q, s, z, tiles=tile) for q, s, z in zip(qs, ss, zs)]

                try:
                    fn = on_cuda(kernel)
                    got = np.asarray(fn(x, qs[:1], scales[:1], zeros[:1])[0], np.float32)
                    err = float(np.abs(got - ref).max() / (np.abs(ref).max() + 1e-12))
                    t = timed(fn, x, qs, scales, zeros)
                except Exception as e:  # a tile choice Triton cannot compile: the next one
                    print(f"{tag} int4[{name}]: {type(e).__name__}: {e}"[:300], flush=True)
                    continue
                grid = f"grid {n // v.block_n}x{v.splits}, K/program {v.k_per_program}"
                flag = " BAD" if err > 2.0**-8 else ""
                print(f"{tag} int4[{name}]: {t / count * 1e6:8.1f} us {nbytes / t / 1e9:6.0f} "
                      f"GB/s-f16eq x{base / t:5.2f} err {err:.1e}{flag} ({grid}, step "
                      f"{v.step})", flush=True)  # fmt: skip


def quantized(model, block: int = BLOCK):
    """``model`` with every MatMul whose B is a 2-D float initializer (K a multiple of
    ``block``) replaced by MatMulNBits: 4 bits, asymmetric (scale and zero point per block)."""
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    nodes, added, count = [], [], 0
    for node in model.graph.node:
        init = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        w = None if init is None else numpy_helper.to_array(init)
        if w is None or w.ndim != 2 or w.shape[0] % block or w.dtype.kind != "f":
            nodes.append(node)
            continue
        dtype, w = w.dtype, w.astype(np.float32)
        k, n = w.shape
        wb = w.T.reshape(n, k // block, block)
        lo, hi = np.minimum(wb.min(-1), 0), np.maximum(wb.max(-1), 0)
        scale = np.where(hi > lo, (hi - lo) / 15, 1).astype(np.float32)
        zero = np.clip(np.round(-lo / scale), 0, 15).astype(np.uint8)
        codes = np.clip(np.round(wb / scale[..., None]) + zero[..., None], 0, 15).astype(np.uint8)
        codes = codes.reshape(n, k)
        zero = np.pad(zero, ((0, 0), (0, zero.shape[1] % 2)))
        name = f"{init.name}_nbits"
        added += [
            numpy_helper.from_array((codes[:, 0::2] | codes[:, 1::2] << 4).astype(np.uint8)
                                    .reshape(n, k // block, block // 2), name + "_q"),
            numpy_helper.from_array(scale.astype(dtype), name + "_s"),
            numpy_helper.from_array((zero[:, 0::2] | zero[:, 1::2] << 4).astype(np.uint8),
                                    name + "_z"),
        ]  # fmt: skip
        nodes.append(helper.make_node(
            "MatMulNBits", [node.input[0], name + "_q", name + "_s", name + "_z"],
            list(node.output), domain="com.microsoft", K=k, N=n, bits=4, block_size=block,
        ))  # fmt: skip
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.initializer.extend(added)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model, count


def tiny_model(new: int = 64) -> None:
    import onnx

    from dml_jax.onnx import InferenceSession
    from dml_jax.onnx.generation import Generator, GeneratorParams

    model, count = quantized(onnx.load("tests/data/decoders/tiny_llama_step.onnx"))
    data = model.SerializeToString()
    prompt = np.random.default_rng(0).integers(1, 90, (1, 8))
    out = {}
    for name, fast in (("kernel", True), ("lax", False)):
        s = InferenceSession(data, fast_paths=fast)
        for _ in range(2):  # the first generation compiles
            g = Generator(s, GeneratorParams(s, max_length=8 + new, batch_size=1))
            g.append_tokens(prompt)
            t = time.perf_counter()
            g.generate_until_done()
            jax.block_until_ready(g._tokens)
            t = time.perf_counter() - t
        out[name] = (np.asarray(g.generated), (new - 1) / t)
    same = bool(np.array_equal(out["kernel"][0], out["lax"][0]))
    print(f"tiny int4 LLaMA step ({count} MatMulNBits, float32): kernel "
          f"{out['kernel'][1]:.0f} tokens/s, fast paths off {out['lax'][1]:.0f} tokens/s, "
          f"{new} greedy tokens equal: {same}", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all-tiles", action="store_true", help="every tile choice at every M")
    p.add_argument("--triton", action="store_true", help="f16 with XLA's default options too")
    p.add_argument("--shapes", nargs="*", default=None, help="KxN, e.g. 2048x8192")
    p.add_argument("--no-model", action="store_true", help="skip the tiny model's line")
    p.add_argument("--rows", nargs="*", type=int, default=list(ROWS), help="rows of A (M)")
    p.add_argument("--tiles", nargs="*", default=None, help="only these TILES (names)")
    args = p.parse_args()
    args.shapes = [tuple(map(int, s.split("x"))) for s in args.shapes] if args.shapes else SHAPES
    start = time.perf_counter()
    print(jax.devices()[0].device_kind, jax.__version__, flush=True)
    products(args)
    if not args.no_model:
        tiny_model()
    print(f"{time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
