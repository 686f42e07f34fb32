"""LSTM as one persistent kernel (Pallas on Mosaic GPU, Hopper): the CUDA fast path of
DML_OPERATOR_LSTM for float16 layers with the default activations.

The lax lowering (``ops/recurrent.py``) runs one loop iteration per step, and each step reads
the recurrence weights R (8 MB at hidden 1024) from L2 again. Here every program (one a
multiprocessor) owns ``UNITS`` hidden units for the whole sequence: their 4 * UNITS rows of R
(gates i, o, f, c) stay in its shared memory from the first step to the last, and so does their
cell state, in registers. A step is:

- wait until every program has published the state of the step before (a grid-wide barrier:
  one global counter that each program raises by one a step, ``red.release``; a program polls
  it until it reaches programs x steps, then ``fence.acquire`` and a proxy fence for TMA);
- bring that state in by TMA, as ``pieces`` float16 pieces of ``h * 2**14`` in chunks of
  ``CHUNK`` columns through a ring of ``RING`` slots, each chunk's products (WGMMA, m64 n32
  k16) issued as it arrives: one piece where half precision is allowed (the state rounded to
  float16, as the lax lowering's one piece); three give the float32 product ``h R^T`` on
  float16 arithmetic, as the lax lowering's ``pieces_product``;
- add the step's ``X W^T`` and biases (computed before the kernel in one GEMM, and brought in
  one step ahead), apply the gates in float32 (each thread's accumulator columns hold the four
  gates of the same units, so the gates meet in registers), update the cell, and store the new
  state's pieces (for the next step) and the step's output by TMA.

The state before the first step may have any magnitude (HiddenInit): its product is taken by
the lax lowering's ``pieces_product`` with its rows scaled, and added to the first step's
``X W^T``. Every later state is ``o * tanh(c)``, so |h| <= 1 and its pieces need no scaling.

Every program must be resident at once (the barrier waits for all of them): the grid is
hidden / UNITS programs, at most one a multiprocessor, and ``applies`` declines a layer with
more. Under ``jax.vmap`` the layers run one after another (``custom_vmap``), never as one
larger grid.

The operator's fast path runs the kernel where ALLOW_HALF_PRECISION_COMPUTATION holds and the
lax lowering otherwise: on three pieces the kernel ran slower than lax (each program reads the
whole state every step, 384 KB in three pieces; TMA multicast over clusters of programs did not
help). On an H200 (jax 0.11.2, benchmarks/RESULTS.md#attention_lstm), hidden 1024, 512 steps, batch
64, input 1024, with half precision: 218,272 steps/s against PyTorch's cuDNN LSTM 120,269
(1.81x) and the lax lowering's 101,548; the kernel alone 3.6 us a step (three pieces 14.9).

``applies``: FLOAT16, FORWARD / BACKWARD / BIDIRECTIONAL (a kernel call per direction), no
SequenceLengthsTensor, peepholes, clipping or coupled forget gate, activations SIGMOID, TANH,
TANH, batch <= 64, hidden a multiple of CHUNK with hidden / UNITS programs at most the
multiprocessor count, on a Hopper GPU under jax 0.11 (``mosaic.hopper``).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops.recurrent import backward_flags, lower_lstm, state_product
from ..precision import half_precision_allowed
from .jax_private import mlir_dialects, mlir_ir
from .mosaic import hopper, multiprocessors, swizzled

UNITS = 8  # hidden units a program: 4 * UNITS = 32 accumulator columns (m64 n32)
BATCH = 64  # rows of a WGMMA (the batch, padded)
CHUNK = 64  # columns of the state a TMA copy brings (128-byte rows)
RING = 16  # state chunks in flight
SCALE = 2.0**14  # the pieces hold h * 2**14 (the scaling of precision.float16_pieces)


def _proxy_fence():
    """``fence.proxy.async.global``: orders this thread's generic-proxy accesses of global
    memory with TMA's (async-proxy) ones."""
    import jax.experimental.pallas.mosaic_gpu as plgpu

    ir = mlir_ir()
    (llvm,) = mlir_dialects("llvm")

    @plgpu.inline_mgpu()
    def fence(ctx):
        del ctx
        llvm.inline_asm(
            ir.Type.parse("!llvm.void"), [], "fence.proxy.async.global;", "", has_side_effects=True
        )

    fence()


def _sigmoid(y):
    return 1.0 / (1.0 + jnp.exp(-y))


def _persistent(xw, first, r, c0, pieces: int):
    """The steps of one direction.

    Args:
        xw: {steps, BATCH, programs, 4 * UNITS} float32: each step's X W^T and biases, a
            program's gate columns i, o, f, c of its units next to each other.
        first: None, or {BATCH, programs, 4 * UNITS} float32: the initial state's product,
            added at step 0.
        r: {programs, 4 * UNITS, hidden} float16: each program's rows of R, in that order.
        c0: {BATCH, hidden} float32: the initial cell.
        pieces: float16 pieces of the state in the products (1: half precision; 3: the
            float32 product, which the fast path leaves to lax, being slower there).

    Returns:
        y {steps, BATCH, hidden}, the last h and c {BATCH, hidden}, all float16 (rounded once
        from the float32 state), and the exchange buffer (discarded).
    """
    import jax.experimental.pallas as pl
    import jax.experimental.pallas.mosaic_gpu as plgpu

    steps, _, programs, cols = xw.shape
    hidden = r.shape[-1]
    kc_count = hidden // CHUNK
    chunks = pieces * kc_count
    ring = min(RING, chunks)
    f32, f16 = jnp.float32, jnp.float16
    state_t = swizzled(plgpu, CHUNK, 2)
    gate_t = swizzled(plgpu, cols, 4)
    unit_t = swizzled(plgpu, UNITS, 2)
    cell_t = swizzled(plgpu, UNITS, 4)

    def kernel(xw_g, *rest):
        first_g = None
        if first is not None:
            first_g, *rest = rest
        r_g, c0_g, y_g, hl_g, cl_g, hp_g, r_s, ring_s, xw_s, c_s, out_s, bars = rest
        r_bar, ring_bar, xw_bar = bars
        j = lax.axis_index("programs")
        mine = pl.ds(j * UNITS, UNITS)
        sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
        for kc in range(kc_count):
            plgpu.copy_gmem_to_smem(r_g.at[j, :, pl.ds(kc * CHUNK, CHUNK)], r_s.at[kc], r_bar.at[0])
        plgpu.copy_gmem_to_smem(c0_g.at[:, mine], c_s, r_bar.at[0])  # kc_count + 1 arrivals
        plgpu.copy_gmem_to_smem(xw_g.at[0, :, j], xw_s.at[0], xw_bar.at[0])
        if first_g is not None:  # a slot of its own
            plgpu.copy_gmem_to_smem(first_g.at[:, j], xw_s.at[2], xw_bar.at[2])
        plgpu.barrier_wait(r_bar.at[0])
        c = c_s[...]

        def gates_in(t):
            """This step's X W^T slot (and the next step's copy issued)."""
            if isinstance(t, int) and t == 0:
                plgpu.barrier_wait(xw_bar.at[0])
                x = xw_s[0]
                if first_g is not None:
                    plgpu.barrier_wait(xw_bar.at[2])
                    x = x + xw_s[2]
                if steps > 1:
                    plgpu.copy_gmem_to_smem(xw_g.at[1, :, j], xw_s.at[1], xw_bar.at[1])
                return x
            slot = lax.rem(t, 2)

            @pl.when(t + 1 < steps)
            def _():
                nxt = 1 - slot
                plgpu.copy_gmem_to_smem(xw_g.at[t + 1, :, j], xw_s.at[nxt], xw_bar.at[nxt])

            plgpu.barrier_wait(xw_bar.at[slot])
            return xw_s[slot]

        def product(t):
            """h_{t-1} R^T * 2**14 for this program's columns, once every program has
            published h_{t-1}."""
            plgpu.semaphore_wait(sem, programs * t, decrement=False, memory_scope="gpu")
            _proxy_fence()
            par = lax.rem(t - 1, 2)

            def fetch(g):
                p, kc = divmod(g, kc_count)
                src = hp_g.at[par, p, :, pl.ds(kc * CHUNK, CHUNK)]
                slot = g % ring
                plgpu.copy_gmem_to_smem(src, ring_s.at[slot], ring_bar.at[slot])

            def scope(acc_ref):
                for g in range(ring):
                    fetch(g)
                for g in range(chunks):
                    plgpu.barrier_wait(ring_bar.at[g % ring])
                    rhs = r_s.at[g % kc_count].transpose((1, 0))
                    plgpu.wgmma(acc_ref, ring_s.at[g % ring], rhs)
                    plgpu.wgmma_wait(1)  # the chunk before is read: its slot is free
                    if g >= 1 and g - 1 + ring < chunks:
                        fetch(g - 1 + ring)
                plgpu.wgmma_wait(0)
                return acc_ref[...]

            return pl.run_scoped(scope, plgpu.ACC((BATCH, cols), f32))

        def cell(t, gates, c):
            """The gates, the new cell and state; the state's pieces and the step's output
            stored (the pieces only where a later step reads them), and published."""
            gi, go, gf, gc = (gates[:, g * UNITS : (g + 1) * UNITS] for g in range(4))
            c = _sigmoid(gf) * c + _sigmoid(gi) * jnp.tanh(gc)
            h = _sigmoid(go) * jnp.tanh(c)
            plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the staging slots are free
            out_s[pieces] = h.astype(f16)
            rest = h * np.float32(SCALE)
            for p in range(pieces):
                head = rest.astype(f16)
                out_s[p] = head
                if p + 1 < pieces:
                    rest = rest - head.astype(f32)
            plgpu.commit_smem()
            plgpu.copy_smem_to_gmem(out_s.at[pieces], y_g.at[t, :, mine])

            def publish():
                for p in range(pieces):
                    plgpu.copy_smem_to_gmem(out_s.at[p], hp_g.at[lax.rem(t, 2), p, :, mine])
                plgpu.wait_smem_to_gmem(0)  # the writes are done
                _proxy_fence()
                plgpu.semaphore_signal(sem, 1, memory_scope="gpu")

            if isinstance(t, int):
                if t + 1 < steps:
                    publish()
            else:
                pl.when(t + 1 < steps)(publish)
            return c, h

        c, h = cell(0, gates_in(0), c)

        def step(t, carry):
            c, _ = carry
            x = gates_in(t)
            acc = product(t)
            return cell(t, acc * np.float32(1 / SCALE) + x, c)

        c, h = lax.fori_loop(1, steps, step, (c, h))
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)
        out_s[0] = h.astype(f16)
        out_s[1] = c.astype(f16)
        plgpu.commit_smem()
        plgpu.copy_smem_to_gmem(out_s.at[0], hl_g.at[:, mine])
        plgpu.copy_smem_to_gmem(out_s.at[1], cl_g.at[:, mine])
        plgpu.wait_smem_to_gmem(0)

    out_type = (
        jax.ShapeDtypeStruct((steps, BATCH, hidden), f16),
        jax.ShapeDtypeStruct((BATCH, hidden), f16),
        jax.ShapeDtypeStruct((BATCH, hidden), f16),
        jax.ShapeDtypeStruct((2, pieces, BATCH, hidden), f16),
    )
    call = plgpu.kernel(
        kernel,
        out_type=out_type,
        grid=(programs,),
        grid_names=("programs",),
        scratch_types=[
            plgpu.SMEM((kc_count, cols, CHUNK), f16, transforms=state_t),
            plgpu.SMEM((ring, BATCH, CHUNK), f16, transforms=state_t),
            plgpu.SMEM((2 if first is None else 3, BATCH, cols), f32, transforms=gate_t),
            plgpu.SMEM((BATCH, UNITS), f32, transforms=cell_t),
            plgpu.SMEM((max(pieces + 1, 2), BATCH, UNITS), f16, transforms=unit_t),
            (
                plgpu.Barrier(num_arrivals=kc_count + 1, num_barriers=1),
                plgpu.Barrier(num_barriers=ring),
                plgpu.Barrier(num_barriers=2 if first is None else 3),
            ),
        ],
        compiler_params=plgpu.CompilerParams(
            approx_math=False, lowering_semantics=plgpu.LoweringSemantics.Warpgroup
        ),
    )
    return call(xw, *(() if first is None else (first,)), r, c0)


@functools.partial(jax.jit, static_argnames=("pieces",))
def lstm_direction(xw, first, r, c0, pieces: int):
    """``_persistent`` with a batching rule: under ``jax.vmap`` the batch entries run one after
    another, each on the whole grid (one larger grid would not be resident at once)."""
    has_first = first is not None

    @jax.custom_batching.custom_vmap
    def run(xw, first, r, c0):
        return _persistent(xw, first if has_first else None, r, c0, pieces)[:3]

    @run.def_vmap
    def _rule(axis_size, in_batched, xw, first, r, c0):
        args = [
            a if batched else jnp.broadcast_to(a, (axis_size, *a.shape))
            for a, batched in zip((xw, first, r, c0), in_batched)
        ]
        outs = lax.map(lambda a: run(*a), tuple(args))
        return outs, (True, True, True)

    if first is None:
        first = jnp.zeros((), jnp.float32)  # a placeholder the kernel does not take
    return run(xw, first, r, c0)


# ---------------------------------------------------------------------------------------------
# The fast path of DML_OPERATOR_LSTM

_ACTIVATIONS = ("DML_OPERATOR_ACTIVATION_SIGMOID", "DML_OPERATOR_ACTIVATION_TANH",
                "DML_OPERATOR_ACTIVATION_TANH")  # fmt: skip


def _programs(hidden: int) -> int | None:
    """Programs of a layer with ``hidden`` units, or None where it is not resident at once."""
    if hidden % CHUNK:
        return None
    programs = hidden // UNITS
    return programs if programs <= multiprocessors() else None


def applies(d: Any) -> bool:
    """The cases the module docstring lists."""
    if d.input_tensor.data_type.name != "FLOAT16" or not hopper():
        return False
    if d.sequence_lengths_tensor is not None or d.peephole_tensor is not None:
        return False
    if d.use_clip_threshold or d.couple_input_forget:
        return False
    names = [a.operator_type for a in d.activation_descs]
    if names != list(_ACTIVATIONS) * len(backward_flags(d)):
        return False
    batch, hidden = d.input_tensor.sizes[2], d.recurrence_tensor.sizes[-1]
    return batch <= BATCH and _programs(hidden) is not None


def lower_lstm_persistent(d: Any, *arrays, pieces: int | None = None) -> tuple:
    """The LSTM of ``d`` (``applies``) with one persistent kernel call per direction; the
    contract of ``ops.recurrent.lower_lstm``. ``pieces``: None for the operator's precision:
    half precision runs the kernel on one float16 piece of the state; otherwise the lax
    lowering runs (the kernel on three pieces, ``pieces=3``, was slower than it: RESULTS,
    benchmarks/RESULTS.md#attention_lstm)."""
    # imported here: a kernel module holds no upper-case string constants at its top level
    # (tests/test_fastpath.py, test_no_module_level_switches)
    from ..fields import INPUT, OUTPUT

    if pieces is None:
        if not half_precision_allowed():
            return tuple(lower_lstm(d, *arrays))
        pieces = 1

    present = [f.name for f in d.declared(INPUT) if getattr(d, f.name) is not None]
    given = dict(zip(present, arrays))
    x = given["input_tensor"][0]  # {seq, batch, input}
    w = given["weight_tensor"][0]  # {D, 4 * hidden, input}
    r = given["recurrence_tensor"][0]  # {D, 4 * hidden, hidden}
    seq, batch, _ = x.shape
    directions, width, hidden = r.shape
    programs = hidden // UNITS
    f32 = jnp.float32

    def gate_order(a):  # {.., 4 * hidden} -> {.., programs, 4 * UNITS}: each program's columns
        a = a.reshape(*a.shape[:-1], 4, programs, UNITS)
        return jnp.swapaxes(a, -3, -2).reshape(*a.shape[:-3], programs, 4 * UNITS)

    # W's rows in the kernel's column order, so that X W^T comes out in it; the batch padded
    w = gate_order(jnp.swapaxes(w, 1, 2)).reshape(directions, -1, programs * 4 * UNITS)
    x = jnp.pad(x, ((0, 0), (0, BATCH - batch), (0, 0)))
    bias = None
    if "bias_tensor" in given:
        b = given["bias_tensor"].astype(f32).reshape(directions, 2, width)
        bias = gate_order(b[:, 0] + b[:, 1])  # {D, programs, 4 * UNITS}
    state = (directions, batch, hidden)
    h0 = given.get("hidden_init_tensor")
    h0 = None if h0 is None else h0.astype(f32).reshape(state)
    c0 = given.get("cell_mem_init_tensor")
    c0 = jnp.zeros(state, f32) if c0 is None else c0.astype(f32).reshape(state)
    ys, hs, cs = [], [], []
    for i, back in enumerate(backward_flags(d)):
        x_i = jnp.flip(x, 0) if back else x  # step order
        xw = jnp.einsum("tbi,ig->tbg", x_i, w[i], preferred_element_type=f32)
        xw = xw.reshape(seq, BATCH, programs, 4 * UNITS)
        if bias is not None:
            xw = xw + bias[i]
        first = None
        if h0 is not None:  # the first step's recurrent product, on any magnitude
            first = state_product(h0[i][None], r[i][None])[0]
            first = gate_order(jnp.pad(first, ((0, BATCH - batch), (0, 0))))
        r_i = r[i].reshape(4, programs, UNITS, hidden).transpose(1, 0, 2, 3)
        r_i = r_i.reshape(programs, 4 * UNITS, hidden)
        c0_i = jnp.pad(c0[i], ((0, BATCH - batch), (0, 0)))
        y, h_last, c_last = lstm_direction(xw, first, r_i, c0_i, pieces)
        y = y[:, :batch]
        ys.append(jnp.flip(y, 0) if back else y)
        hs.append(h_last[:batch])
        cs.append(c_last[:batch])
    results = {
        "output_sequence_tensor": jnp.stack(ys, axis=1),
        "output_single_tensor": jnp.stack(hs)[None],
        "output_cell_single_tensor": jnp.stack(cs)[None],
    }
    return tuple(results[f.name] for f in d.declared(OUTPUT) if getattr(d, f.name) is not None)


def _register() -> None:
    register_fast_path("DML_OPERATOR_LSTM", "persistent", applies, lower_lstm_persistent)


_register()
