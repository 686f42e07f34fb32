"""ONNX's light networks (``onnx/backend/test/data/light``) on the CPU: ``dml_jax.onnx``'s
compiled program against onnxruntime's CPU provider, in the same process.

Each model is compiled once by ``compile_onnx`` (jit, one XLA program) and opened once by
onnxruntime (``CPUExecutionProvider``, ``intra_op_num_threads`` = ``--threads``). A sample is
``--iters`` calls followed by one ``block_until_ready`` (onnxruntime's calls are synchronous);
the two alternate sample by sample, so that both see the same machine load, and the table
reports each one's median over ``--samples`` samples, their ratio (and the ratio of the two
fastest samples, steadier on a loaded machine), and the largest absolute difference between
the two outputs relative to onnxruntime's largest magnitude. (The light models' weights are
constants of one value each: XLA holds such a weight as a broadcast of one number, which it
writes out again at every call, and the outputs agree trivially. ``--random-weights`` gives
every weight of two or more dimensions random values, scaled by its fan-in, as a trained
network's would be: real constants, and outputs that say something.)

``--apart`` times each runtime alone instead, in a child process of its own (the other not
loaded), the two alternating process by process for ``--rounds`` rounds: in one process,
onnxruntime's workers, which spin after a run (its default, and part of its speed), took the
cores from the dml_jax sample after theirs (benchmarks/experiments/README.md).

``--session`` times ``InferenceSession(...).run`` instead (inputs and outputs as NumPy arrays,
as onnxruntime's), whose weights are compiled in on the CPU up to
``program.CPU_BAKED_WEIGHTS_MAX_BYTES``; ``--weights-as-arguments`` passes them at every call
instead (the sessions before that rule). ``--no-winograd`` runs every 3x3 convolution as XLA's
convolution (``conv_forms._winograd_fits`` never holds): the comparisons of docs/onnx.md, "On
the CPU".

Usage: ``JAX_PLATFORMS=cpu PYTHONPATH=. python benchmarks/experiments/onnx_cpu.py
[--only NAME ...] [--samples 7] [--iters 5] [--threads 2] [--random-weights]
[--compiler-options JSON] [--session [--weights-as-arguments]] [--no-winograd]
[--apart [--rounds 3]]``, from the
repository root (``--compiler-options`` go over the session's CPU defaults,
``dml_jax.onnx.program.CPU_COMPILER_OPTIONS``).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import time

import jax
import numpy as np
import onnx
import onnxruntime as ort

from dml_jax.onnx import InferenceSession, compile_onnx
from dml_jax.onnx import session as session_module
from dml_jax.ops import conv_forms

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _sample(call, iters: int) -> float:
    t = time.perf_counter()
    out = None
    for _ in range(iters):
        out = call()
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / iters


def with_random_weights(path: str) -> onnx.ModelProto:
    """The model with each ConstantOfShape of a weight (two or more dimensions) replaced by an
    initializer of normal values of standard deviation sqrt(2 / fan-in); one-dimensional
    constants (biases, batch normalization's statistics) keep their value."""
    from onnx import numpy_helper

    model = onnx.load(path)
    known = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    rng = np.random.default_rng(0)
    kept = []
    for node in model.graph.node:
        shape = known.get(node.input[0]) if node.op_type == "ConstantOfShape" else None
        if shape is None or len(shape) < 2:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shape)
        fan_in = int(np.prod(shape[1:]))
        value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        model.graph.initializer.append(
            numpy_helper.from_array(value.astype(np.float32), node.output[0])
        )
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


def _dml_call(source, options=None, session=False):
    """dml_jax's call of the model (``compile_onnx``'s program, or ``InferenceSession.run``)
    on a fixed random input: (call, the input as NumPy)."""
    if session:
        blob = source if isinstance(source, str) else source.SerializeToString()
        s = InferenceSession(blob, compiler_options=options)
        x = np.random.default_rng(0).standard_normal(tuple(s.get_inputs()[0].shape))
        feed = {s.get_inputs()[0].name: x.astype(np.float32)}
        return (lambda: s.run(None, feed)[0]), feed[s.get_inputs()[0].name]
    model = compile_onnx(source, compiler_options=options)
    x = np.random.default_rng(0).standard_normal(model.input_shapes[0]).astype(np.float32)
    arg = jax.device_put(x, jax.devices("cpu")[0])
    return (lambda: model(arg)), x


def _ort_call(source, threads: int, x=None):
    """onnxruntime's call of the model (CPU provider, ``threads`` intra-op threads) on ``x``,
    or on the same random input as ``_dml_call``'s where ``x`` is None."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    blob = source if isinstance(source, str) else source.SerializeToString()
    sess = ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    if x is None:
        shape = tuple(d if isinstance(d, int) else 1 for d in inp.shape)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    feed = {inp.name: x}
    return lambda: sess.run(None, feed)[0]


def measure(
    path: str, samples: int, iters: int, threads: int, random: bool, options=None, session=False
) -> dict:
    name = os.path.basename(path)[len("light_") : -len(".onnx")]
    source = with_random_weights(path) if random else path
    t0 = time.perf_counter()
    call, x = _dml_call(source, options, session)
    ours = jax.block_until_ready(call())
    cold = time.perf_counter() - t0
    theirs_call = _ort_call(source, threads, x)
    theirs = theirs_call()
    scale = float(np.max(np.abs(theirs))) or 1.0
    diff = float(np.max(np.abs(np.asarray(ours) - theirs))) / scale
    ours_t, theirs_t = [], []
    _sample(call, 1)
    for _ in range(samples):
        ours_t.append(_sample(call, iters))
        theirs_t.append(_sample(theirs_call, iters))
    a, b = statistics.median(ours_t), statistics.median(theirs_t)
    return {"model": name, "dml_jax_ms": a * 1e3, "ort_ms": b * 1e3, "ratio": a / b,
            "best_ratio": min(ours_t) / min(theirs_t), "rel_diff": diff, "cold_s": cold}  # fmt: skip


def measure_side(
    path: str, side: str, samples: int, iters: int, threads: int, random: bool, options=None
) -> float:
    """Milliseconds per call of one runtime alone (``side``: dml_jax's ``compile_onnx`` program
    or onnxruntime's session, the other not loaded): the median of ``samples`` samples."""  # fmt: skip
    source = with_random_weights(path) if random else path
    call = _dml_call(source, options)[0] if side == "dml" else _ort_call(source, threads)
    _sample(call, 1)
    return statistics.median(_sample(call, iters) for _ in range(samples)) * 1e3


def apart(paths, a) -> None:
    """``--apart``: each runtime timed alone in a child process of its own, the two alternating
    for ``--rounds`` rounds per model; the medians over the rounds, their ratio and the ratio of
    the fastest rounds."""
    import subprocess
    import sys

    print(f"{'model':<14}{'dml_jax ms':>12}{'ort ms':>10}{'ratio':>8}{'best':>7}  rounds")
    for path in paths:
        name = os.path.basename(path)[len("light_") : -len(".onnx")]
        times = {"dml": [], "ort": []}
        for r in range(a.rounds):
            for side in ("dml", "ort") if r % 2 == 0 else ("ort", "dml"):
                cmd = [sys.executable, __file__, "--side", side, "--only", name,
                       "--samples", str(a.samples), "--iters", str(a.iters),
                       "--threads", str(a.threads)]  # fmt: skip
                cmd += ["--random-weights"] if a.random_weights else []
                if a.compiler_options:
                    cmd += ["--compiler-options", json.dumps(a.compiler_options)]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                times[side].append(float(out.split()[-1]))
        d, o = statistics.median(times["dml"]), statistics.median(times["ort"])
        rounds = " ".join(f"{x:.1f}/{y:.1f}" for x, y in zip(times["dml"], times["ort"]))
        print(f"{name:<14}{d:>12.2f}{o:>10.2f}{d / o:>8.2f}"
              f"{min(times['dml']) / min(times['ort']):>7.2f}  {rounds}", flush=True)  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", help="model names (resnet50, shufflenet, ...)")
    p.add_argument("--samples", type=int, default=7)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--random-weights", action="store_true", help="random weights, not constants")
    p.add_argument("--compiler-options", type=json.loads, default=None,
                   help="XLA options over the session's CPU defaults, as JSON")  # fmt: skip
    p.add_argument("--session", action="store_true", help="time InferenceSession.run")
    p.add_argument("--weights-as-arguments", action="store_true",
                   help="with --session: the weights passed at every call, not compiled in")  # fmt: skip
    p.add_argument("--no-winograd", action="store_true", help="no Winograd 3x3 convolutions")
    p.add_argument("--apart", action="store_true",
                   help="each runtime alone in its own process, alternating (--rounds)")  # fmt: skip
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--side", choices=("dml", "ort"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.weights_as_arguments:
        session_module.CPU_BAKED_WEIGHTS_MAX_BYTES = -1
    if a.no_winograd:
        conv_forms._WINOGRAD_MIN_CHANNELS = math.inf
    paths = sorted(glob.glob(os.path.join(LIGHT, "*.onnx")))
    if a.only:
        paths = [q for q in paths if any(f"light_{n}.onnx" == os.path.basename(q) for n in a.only)]
    if a.side:
        print(measure_side(paths[0], a.side, a.samples, a.iters, a.threads, a.random_weights,
                           a.compiler_options))  # fmt: skip
        return
    print(f"jax {jax.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs, "
          f"median of {a.samples} samples of {a.iters} calls, "
          + (f"each runtime alone in a process, {a.rounds} rounds" if a.apart else "alternating")
          + (", random weights" if a.random_weights else "")
          + (", InferenceSession.run" if a.session else ", compile_onnx")
          + (", weights as arguments" if a.weights_as_arguments else "")
          + (", no Winograd" if a.no_winograd else ""))  # fmt: skip
    if a.apart:
        apart(paths, a)
        return
    print(f"{'model':<14}{'dml_jax ms':>12}{'ort ms':>10}{'ratio':>8}{'best':>7}{'rel diff':>10}"
          f"{'cold s':>8}")  # fmt: skip
    for path in paths:
        r = measure(path, a.samples, a.iters, a.threads, a.random_weights, a.compiler_options,
                    a.session)  # fmt: skip
        print(f"{r['model']:<14}{r['dml_jax_ms']:>12.2f}{r['ort_ms']:>10.2f}{r['ratio']:>8.2f}"
              f"{r['best_ratio']:>7.2f}{r['rel_diff']:>10.1e}{r['cold_s']:>8.1f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
