"""Dynamic int8 on the CPU: a transformer encoder of BERT-base's sizes (``examples/
onnx_transformer.py``: d 768, 12 heads, ffn 3072, ``--layers`` layers, ``--tokens`` tokens, batch
1) saved in float32 and quantized by onnxruntime's ``quantize_dynamic`` (DynamicQuantizeLinear +
MatMulInteger, int8 weights), each run by ``InferenceSession.run`` and by onnxruntime's CPU
provider in the same process: the session and first call, then the median of ``--samples``
calls; outputs compared with onnxruntime's.

``--dots`` times XLA's integer products on this CPU alone, at the encoder's largest shape
(``--tokens`` x 768 x 3072), one jitted product each: int8 x int8 -> int32 (the form
``ops._quant.zero_point_product`` lowers MatMulInteger to, uint8 operands shifted to int8),
uint8 x int8, int16 x int16, bfloat16 with float32 sums, and float32.

Usage: ``JAX_PLATFORMS=cpu PYTHONPATH=.:examples python benchmarks/experiments/quantized_cpu.py
[--layers 4] [--tokens 128] [--samples 10] [--dots]``, from the repository root.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


def _median_ms(call, samples: int) -> float:
    import numpy as np

    call()
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def dots(tokens: int, samples: int) -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (tokens, 768), dtype=np.int8)
    b = rng.integers(-128, 128, (768, 3072), dtype=np.int8)
    spec = (((1,), (0,)), ((), ()))
    forms = {
        "int8 x int8 -> int32": (a, b, jnp.int32),
        "uint8 x int8 -> int32": (a.view(np.uint8), b, jnp.int32),
        "int16 x int16 -> int32": (a.astype(np.int16), b.astype(np.int16), jnp.int32),
        "bfloat16 -> float32": (a.astype(jnp.bfloat16), b.astype(jnp.bfloat16), jnp.float32),
        "float32": (a.astype(np.float32), b.astype(np.float32), jnp.float32),
    }
    for name, (x, y, out) in forms.items():
        fn = jax.jit(lambda x, y, out=out: lax.dot_general(x, y, spec, preferred_element_type=out))
        x, y = jnp.asarray(x), jnp.asarray(y)
        ms = _median_ms(lambda fn=fn, x=x, y=y: fn(x, y).block_until_ready(), samples)
        print(f"{name:24s} {ms:7.3f} ms  {2 * tokens * 768 * 3072 / ms / 1e9:6.2f} TOP/s")


def models(layers: int, tokens: int, samples: int) -> None:
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx_transformer import example_input, tiny_transformer
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from dml_jax.onnx import InferenceSession

    folder = tempfile.mkdtemp()
    model = tiny_transformer(d=768, heads=12, ffn=3072, layers=layers)
    f32 = os.path.join(folder, "float32.onnx")
    onnx.save(model, f32)
    i8 = os.path.join(folder, "int8.onnx")
    quantize_dynamic(f32, i8, weight_type=QuantType.QInt8)
    x = example_input(1, tokens, 768)
    name = model.graph.input[0].name
    for path in (f32, i8):
        start = time.perf_counter()
        ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        want = ref.run(None, {name: x})[0]
        ort_first = time.perf_counter() - start
        start = time.perf_counter()
        s = InferenceSession(path)
        got = s.run(None, {name: x})[0]
        first = time.perf_counter() - start
        ms = _median_ms(lambda s=s: s.run(None, {name: x}), samples)
        ort_ms = _median_ms(lambda ref=ref: ref.run(None, {name: x}), samples)
        diff = float(np.abs(got - want).max() / np.abs(want).max())
        print(f"{os.path.basename(path):13s} dml_jax {ms:7.2f} ms (first {first:.2f} s)  "
              f"onnxruntime {ort_ms:7.2f} ms (first {ort_first:.2f} s)  "
              f"max diff / max {diff:.2g}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--dots", action="store_true", help="XLA's integer products alone")
    args = p.parse_args()
    if args.dots:
        dots(args.tokens, args.samples)
    else:
        models(args.layers, args.tokens, args.samples)


if __name__ == "__main__":
    main()
