"""Ping-pong GEMM: product groups in flight vs time and energy, cold and sustained (experiment)."""

import ctypes, os, sys, threading, time
import jax, jax.numpy as jnp, numpy as np
from dml_jax.kernels import gemm

nv = ctypes.CDLL("libnvidia-ml.so.1")
nv.nvmlInit_v2()
h = ctypes.c_void_p()
nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h))
samples, stop = [], False


def energy():
    e = ctypes.c_ulonglong()
    nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e))
    return e.value  # mJ


def sampler():
    while not stop:
        c = ctypes.c_uint()
        nv.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(c))
        samples.append((time.perf_counter(), c.value))
        time.sleep(0.002)


threading.Thread(target=sampler, daemon=True).start()
M = 8192
rng = np.random.default_rng(0)


def arr(*s):
    return jnp.asarray(rng.standard_normal(s).astype(np.float16) * 0.05)


def sustained(f, args, warm_s=1.0, meas_s=0.8):
    jax.block_until_ready(f(*args))
    time.sleep(0.5)
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < 0.04:
        o = f(*args)
        n += 1
    jax.block_until_ready(o)
    cold = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        for _ in range(20):
            o = f(*args)
    jax.block_until_ready(o)
    e0, t1, n = energy(), time.perf_counter(), 0
    while time.perf_counter() - t1 < meas_s:
        for _ in range(20):
            o = f(*args)
        n += 20
    jax.block_until_ready(o)
    t2, e1 = time.perf_counter(), energy()
    cl = [c for t, c in samples if t1 <= t <= t2]
    return (t2 - t1) / n, cold, (e1 - e0) / n, np.mean(cl) if cl else 0


shapes = {
    "fc1 bias+gelu": (1024, 4096, dict(gelu=True)),
    "fc1 bias": (1024, 4096, {}),
    "qkv bias split": (1024, 3072, dict(split=64)),
    "out+res": (1024, 1024, dict(res=True)),
}
only = sys.argv[1:]
for name, (k, n, kw) in shapes.items():
    if only and not any(o in name for o in only):
        continue
    a, b, c, r = arr(M, k), arr(k, n), arr(1, n), arr(M, n)
    v = gemm.View(M, n, k, False)
    flop = 2 * M * n * k
    outs = {}
    for depth in (1, 2, 3, 1):
        gemm.PP_IN_FLIGHT = depth
        gemm.fused_gemm.clear_cache()
        f = jax.jit(
            lambda a, b, c, r: gemm.fused_gemm(
                a, b, v, c=c, c_row=True, gelu=kw.get("gelu", False),
                residual=r if kw.get("res") else None, split=kw.get("split", 0),
                schedule="pingpong",
            )
        )
        per, cold, mj, clk = sustained(f, (a, b, c, r))
        o = f(a, b, c, r)
        outs[depth] = [np.asarray(x) for x in (o if isinstance(o, tuple) else (o,))]
        print(
            f"{name:15s} in flight {depth}: sustained {per * 1e6:7.1f} us {flop / per / 1e12:5.0f} TF "
            f"{mj:6.2f} mJ/call ({mj / per / 1e3:4.0f} W) clock {clk:5.0f} MHz  cold {cold * 1e6:7.1f} us",
            flush=True,
        )
    same = all(all(np.array_equal(x, y) for x, y in zip(outs[1], outs[d])) for d in outs)
    print(f"{name:15s} all depths equal bit for bit: {same}", flush=True)
    if "torch" in os.environ.get("PROBE", "") and not kw:
        import torch

        ta = torch.from_numpy(np.asarray(a)).cuda()
        tb = torch.from_numpy(np.asarray(b)).cuda()
        tc = torch.from_numpy(np.asarray(c)).cuda()

        def tf(*_):
            return torch.addmm(tc, ta, tb)

        class W:
            pass

        jax_sync = jax.block_until_ready
        jax.block_until_ready = lambda o: torch.cuda.synchronize()
        per, cold, mj, clk = sustained(tf, ())
        jax.block_until_ready = jax_sync
        print(
            f"{name:15s} torch addmm: sustained {per * 1e6:7.1f} us {flop / per / 1e12:5.0f} TF "
            f"{mj:6.2f} mJ/call ({mj / per / 1e3:4.0f} W) clock {clk:5.0f} MHz  cold {cold * 1e6:7.1f} us",
            flush=True,
        )
stop = True
