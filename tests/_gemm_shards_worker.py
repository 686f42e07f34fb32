"""The GEMM kernel on each device's shards (``kernels/gemm_shards.py``), for
tests/test_gemm_shards.py, on 2 and 2 x 2 meshes of simulated CPU devices (run in a subprocess:
the device count is fixed when JAX starts).

CUDA's choices are traced on this CPU (``fastpath.cuda_present`` and ``gemm.hopper`` forced
true, each program traced inside ``fastpath.target_platform("cuda")``). The Mosaic kernel
cannot run here, so ``gemm.fused_gemm`` is replaced by a stand-in with its contract
(tests/_gemm_model.py, which tests/test_gemm_kernel.py holds the kernel to) that ends in an
interpret-mode Pallas call: a kernel XLA cannot partition, which runs on the CPU. Each case
reports its values against a float64 reference, the compiled program's collectives, the
shapes the stand-in was called with inside the partitioned program, and the Pallas calls of
its jaxpr outside a ``custom_partitioning`` region. The last line of stdout is one JSON
object, ``{case: {...}}``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
).strip()
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import _megatron_mlp  # this folder's
import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
from _gemm_model import model  # this folder's
from _workers import collective_counts, interpreted, outside, regions  # this folder's
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import dml_jax as dml
from dml_jax import fastpath, hlo
from dml_jax.kernels import gemm

T = dml.TensorDesc
CALLS: list = []


def stand_in(a, b, v, **kw):
    """The kernel's contract (tests/_gemm_model.py) ending in an interpret-mode Pallas call;
    the shapes it is called with recorded in ``CALLS``."""
    CALLS.append([list(a.shape), list(b.shape)])
    kw.pop("schedule", None)
    y = model(a, b, v, **kw)
    return tuple(copied(t) for t in y) if isinstance(y, tuple) else copied(y)


def copied(y):
    """``y`` through an interpret-mode Pallas call: a kernel XLA cannot partition."""
    import jax.experimental.pallas as pl

    def copy(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    return pl.pallas_call(copy, out_shape=jax.ShapeDtypeStruct(y.shape, y.dtype), interpret=True)(y)


def run(fn, args, mesh, in_specs, out_spec) -> dict:
    """``fn`` traced for CUDA over ``mesh`` (sharded) and run on the CPU."""

    def body(*a):
        with fastpath.sharded():
            return fn(*a)

    start = len(CALLS)
    with fastpath.target_platform("cuda"):
        j = jax.jit(body, in_shardings=tuple(NamedSharding(mesh, s) for s in in_specs),
                    out_shardings=NamedSharding(mesh, out_spec))  # fmt: skip
        got = np.asarray(j(*args), np.float64)
        text = j.lower(*args).compile().as_text()
        loose = outside(jax.make_jaxpr(body)(*args).jaxpr)
    return {"got": got, "collectives": collective_counts(text), "calls": CALLS[start:],
            "outside": loose}  # fmt: skip


def error(got, want) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def products(mesh) -> dict:
    """A standalone GEMM with a bias row (``A x B^T + C``) split four ways."""
    m, k, n = 256, 512, 1024
    d = dml.GemmOperatorDesc(T("FLOAT16", (m, k)), T("FLOAT16", (n, k)),
                             T("FLOAT16", (m, n), strides=(0, 1)), T("FLOAT16", (m, n)),
                             trans_b="TRANSPOSE", alpha=0.5)  # fmt: skip
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = (rng.standard_normal((n, k)) / 16).astype(np.float16)
    row = rng.standard_normal((1, n)).astype(np.float16)
    c = np.broadcast_to(row, (m, n))
    want = 0.5 * (a.astype(np.float64) @ b.T.astype(np.float64)) + row
    op = dml.compile_operator(d)
    out = {}
    for name, specs, spec in (
        ("column-parallel", (P(), P("x"), P(None, "x")), P(None, "x")),
        ("row-parallel", (P(None, "x"), P(None, "x"), P()), P()),
        # the sums wanted split by rows (sequence parallelism): scattered, not summed whole
        ("row-parallel, rows of the sums split", (P(None, "x"), P(None, "x"), P()), P("x")),
        ("data-parallel", (P("x"), P(), P()), P("x")),
        ("rows and columns on one axis", (P("x"), P("x"), P()), P(None, "x")),
    ):
        r = run(op.fn, (a, b, c), mesh, specs, spec)
        r["relative_error"] = error(r.pop("got"), want)
        out[f"GEMM {name}"] = r
    # columns split into shards of 128, narrower than the kernel's tiles (256): lax on them
    narrow = dml.GemmOperatorDesc(T("FLOAT16", (m, k)), T("FLOAT16", (256, k)),
                                  T("FLOAT16", (m, 256), strides=(0, 1)), T("FLOAT16", (m, 256)),
                                  trans_b="TRANSPOSE")  # fmt: skip
    r = run(dml.compile_operator(narrow).fn, (a, b[:256], c[:, :256]), mesh,
            (P(), P("x"), P(None, "x")), P(None, "x"))  # fmt: skip
    want_narrow = a.astype(np.float64) @ b[:256].T.astype(np.float64) + row[:, :256]
    r["relative_error"] = error(r.pop("got"), want_narrow)
    out["GEMM column-parallel, shards narrower than the kernel's tiles"] = r
    fastpath.PER_SHARD = False  # the kernel gives way to lax, as before it ran per shard
    r = run(op.fn, (a, b, c), mesh, (P(), P("x"), P(None, "x")), P(None, "x"))
    r["relative_error"] = error(r.pop("got"), want)
    out["GEMM column-parallel, PER_SHARD off"] = r
    fastpath.PER_SHARD = True
    # many rows, few columns (a layer's tokens by a narrow weight): B is the one gathered
    tall = dml.GemmOperatorDesc(T("FLOAT16", (2048, k)), T("FLOAT16", (256, k)),
                                T("FLOAT16", (2048, 256), strides=(0, 1)),
                                T("FLOAT16", (2048, 256)), trans_b="TRANSPOSE")  # fmt: skip
    a2 = rng.standard_normal((2048, k)).astype(np.float16)
    c2 = np.broadcast_to(row[:, :256], (2048, 256))
    r = run(dml.compile_operator(tall).fn, (a2, b[:256], c2), mesh, (P("x"), P("x"), P()),
            P("x"))  # fmt: skip
    want = a2.astype(np.float64) @ b[:256].T.astype(np.float64) + row[:, :256]
    r["relative_error"] = error(r.pop("got"), want)
    out["GEMM rows and columns on one axis, B smaller"] = r
    return out


def mlp(mesh) -> dict:
    """The Megatron MLP block (tests/_megatron_mlp.py): the first product column-parallel (its
    GELU fused), the second row-parallel (its residual add fused)."""
    values = _megatron_mlp.inputs()
    compiled = dml.compile_graph(_megatron_mlp.graph(), reinterpret_edges=True)
    specs = (P(), P("x"), P(None, "x"), P(None, "x"), P())
    r = run(compiled.fn, tuple(values), mesh, specs, P())
    r["relative_error"] = error(r.pop("got"), _megatron_mlp.reference(values))
    return {"MLP block, Megatron's split": r}


def gpt_layer(mesh) -> dict:
    """One layer of the networks suite's GPT stack, tensor-parallel (examples/networks.py),
    compiled as the networks suite compiles it (the normalization kernels interpreted), its
    attention a stand-in (cuDNN's is not on the CPU), so no values. Its four products go
    through per-shard regions (the QKV projection writing the heads apart for the attention,
    the first MLP product with its GELU, the two row-parallel products with their residual
    adds); its normalizations are too small for their kernel and run in lax."""
    from dml_jax.kernels import attention

    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import networks

    attention.applies = lambda d: True  # cuDNN's check compiles for a GPU

    def attend(d, *arrays, qkv=None):  # cuDNN is not on the CPU: causal attention in jnp
        q, k, v = (t.astype(jnp.float32) for t in qkv)  # {B, S, H, D}
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * d.scale
        causal = jnp.tril(jnp.ones(logits.shape[-2:], bool))
        weights = jax.nn.softmax(jnp.where(causal, logits, -jnp.inf), axis=-1)
        out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).astype(qkv[0].dtype)
        return (out.reshape(d.output_tensor.sizes),)

    attention.lower = attend
    net = networks.gpt_stack(2, 128, 512, 8, 1, "FLOAT16", ffn=2048)
    ins = networks.shardings(net, mesh, None, "x")
    args = [jax.ShapeDtypeStruct(t.sizes, t.dtype, sharding=s)
            for t, s in zip(net.input_descs, ins)]  # fmt: skip
    # as the networks suite compiles it: the graph compiled with its shardings
    split = net.compile(ins, NamedSharding(mesh, P()))
    interpreted()  # the normalization kernels, so that the program compiles on the CPU
    with fastpath.target_platform("cuda"):
        jaxpr = jax.make_jaxpr(split._jitted)(*args).jaxpr
        text = split._jitted.lower(*args).compile().as_text()
    return {"GPT layer, tensor-parallel": {"outside": outside(jaxpr), "regions": regions(jaxpr),
                                           "collectives": hlo.collectives(text)}}  # fmt: skip


def two_axes(_) -> dict:
    """A (data, model) mesh of 2 x 2: A's rows over "data" and B's columns, or K, over
    "model" (Megatron's split of a data-parallel batch)."""
    mesh = jax.make_mesh((2, 2), ("data", "model"))
    m, k, n = 512, 512, 1024
    d = dml.GemmOperatorDesc(T("FLOAT16", (m, k)), T("FLOAT16", (n, k)),
                             T("FLOAT16", (m, n), strides=(0, 1)), T("FLOAT16", (m, n)),
                             trans_b="TRANSPOSE")  # fmt: skip
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = (rng.standard_normal((n, k)) / 16).astype(np.float16)
    row = rng.standard_normal((1, n)).astype(np.float16)
    want = a.astype(np.float64) @ b.T.astype(np.float64) + row
    op = dml.compile_operator(d)
    out = {}
    for name, specs, spec in (
        ("column", (P("data"), P("model"), P(None, "model")), P("data", "model")),
        ("row", (P("data", "model"), P(None, "model"), P()), P("data")),
    ):
        r = run(op.fn, (a, b, np.broadcast_to(row, (m, n))), mesh, specs, spec)
        r["relative_error"] = error(r.pop("got"), want)
        out[f"GEMM on data x model, {name}-parallel"] = r
    return out


def main() -> None:
    fastpath.cuda_present = lambda: True  # CUDA's choices traced on this CPU
    gemm.hopper = lambda: True
    gemm.fused_gemm = stand_in
    mesh = jax.make_mesh((2,), ("x",), devices=jax.devices()[:2])
    result = {}
    for part in (products, mlp, gpt_layer, two_axes):
        try:
            result.update(part(mesh))
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails on it
            result[part.__name__] = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
