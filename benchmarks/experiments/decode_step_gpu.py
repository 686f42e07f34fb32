"""Where a decode step's time goes: the 1B-class LLaMA (``dml_jax.bench.decoders``) exported in
float16 (and, ``--int4``, quantized to 4 bits), generated through ``Generator`` at batch 1
under several sets of XLA flags, each in its own process (XLA reads its flags once):

- tokens/s of ``generate_until_done`` (``loop``: runs of ``--steps`` steps a dispatch, the
  ``GeneratorParams.steps_per_dispatch``; one ``lax.while_loop`` a bucket before 2026-11-28)
  and of the ``generate_next_token`` loop (a dispatch a token, no sync between them), median
  of ``--samples`` generations;
- from a ``jax.profiler`` trace of one generation: the GPU kernels a token, their summed time
  a token and the busy fraction (summed kernel time over the span from the first kernel to the
  last), and the kernels that take most of it.

A step that reads 2.47 GB in 1.44 ms while its kernels sum to, say, 0.7 ms is waiting on the
host (a while loop's condition is read back to the host at every iteration) or on launches.

With ``--devices N`` the float16 export also runs on a ``"model"`` mesh of N GPUs (tensor
parallel, the cache split over its heads), the kernels those of the first GPU.

Each process also reports its decode programs' graph rewrites and attention nodes
(``graphs``) and why AttentionFusion left a softmax unfused (``attention_declined``).

Usage: ``PYTHONPATH=. python3 benchmarks/experiments/decode_step_gpu.py [--int4]
[--int4-tiles "" one_row=1] [--int4-only] [--attention "" cudnn lax decode:256] [--devices 2]
[--dump-hlo] [--builder] [--keep bench_out/models]`` (an int4 process per set of the 4-bit
kernel's tunables; a process per form of the attention; ``--int4-only``, no float16 process;
``--builder``, the model in ONNX Runtime GenAI's model-builder form; ``--keep``, the exports
kept for a later call); it writes ``$OUT/decode_step.json`` when
``OUT`` is set, and with ``--dump-hlo`` each process's optimized HLO of its decode steps
(``$OUT/hlo-N``: a run of steps' module and a single step's) with its kernels summarized
(``hlo_kernels.py``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import gpu_trace  # this folder's
import numpy as np

FLAGS = {
    "default": "",
    "no_command_buffer": "--xla_gpu_enable_command_buffer=",
    "command_buffer_while": (
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,WHILE,CONDITIONAL"
    ),
    # the sharded decoder's small all-reduces (two a layer, a token's features each) as XLA's
    # own one-kernel all-reduce instead of NCCL's
    "one_shot": "--xla_gpu_unsupported_use_all_reduce_one_shot_kernel=true",
    # the collectives inside XLA's command buffers (CUDA graphs) with the step's other kernels,
    # where by default each one splits the graph and is launched from the host
    "command_buffer_collectives": (
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,COLLECTIVES"
    ),
    "command_buffer_collectives_one_shot": (
        "--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN,COLLECTIVES"
        " --xla_gpu_unsupported_use_all_reduce_one_shot_kernel=true"
    ),
}


# Options that run one process per value (every combination of them), the float16 export's
# and (but for the one-row form) the int4 export's: flag -> (argument, its part of the run's
# name, what a value is).
VARIANTS = {
    "--one-row-form": ("one_row_form", " one-row {}", (
        "form of GEMM's one-row products, float16 only ('' the default; 'repeat')")),
    "--attention": ("attention", " attention {}", (
        "form of a decode step's attention ('' the default, the decode kernel; 'decode:N' its "
        "splits every N keys; 'cudnn': cuDNN's path; 'lax': none)")),
    "--set": ("set", " [{}]", (
        "set of module tunables ('' none; "
        "'dml_jax.onnx.optimize.attention.MIN_KEYS_ONE_QUERY=1;...', Python literals)")),
    "--disable": ("disable", " without {}", (
        "set of graph rewrites left out ('' none; 'GroupedQueryGemms,...')")),
    "--buckets": ("buckets", " buckets {}", (
        "GeneratorParams.buckets ('' the default; '16,256' with --prompt 16: the prompt's "
        "bucket, then every step at the cache's 256 positions, which it reads without a "
        "slice)")),
}  # fmt: skip


def child(
    path: str,
    samples: int,
    new: int,
    prompt_len: int,
    tiles: str = "",
    steps: int | None = None,
    devices: int = 1,
    one_row_form: str = "",
    settings: str = "",
    disabled: str = "",
    buckets: str = "",
) -> dict:
    """Runs in a process of its own (its XLA_FLAGS): tokens/s and the kernel profile; with
    ``tiles`` (``one_row=1,block_n=128``...), the 4-bit kernel's tunables for this process
    (``int4_gemm.Tiles``, in place of the defaults); ``settings``, module tunables set first
    (``dml_jax.onnx.optimize.attention.MIN_KEYS_ONE_QUERY=1;...``); ``disabled``, graph
    rewrites the session leaves out (``GroupedQueryGemms,...``); ``buckets``, the generations'
    ``GeneratorParams.buckets`` (``16,256``; '' the default)."""
    import jax

    from dml_jax.bench.suites.decode import dml_generation
    from dml_jax.onnx import InferenceSession

    if tiles:
        from kernel_sass import tiles_of  # this folder's

        from dml_jax.kernels import int4_gemm

        chosen, plan = tiles_of(tiles), int4_gemm.plan

        def planned(m, n, k, block, tiles=None):
            return plan(m, n, k, block, tiles or chosen)

        int4_gemm.plan = planned

    from onnx_compile_time import set_tunables  # this folder's

    set_tunables(list(filter(None, settings.split(";"))))  # MODULE.NAME=VALUE;...
    if one_row_form:  # how GEMM's lowering widens a product of one row (ops/gemm_conv.py)
        from dml_jax.ops import gemm_conv

        gemm_conv.ONE_ROW_FORM = one_row_form
    # why AttentionFusion left a softmax unfused (its DEBUG log), counted by reason
    import collections
    import logging

    declined: collections.Counter = collections.Counter()

    class Count(logging.Handler):
        def emit(self, record):
            declined[record.getMessage()] += 1

    log = logging.getLogger("dml_jax.onnx.optimize.attention")
    log.setLevel(logging.DEBUG)
    log.addHandler(Count())
    log.propagate = False
    mesh = None
    if devices > 1:  # tensor parallel: the session's "model" axis over the first GPUs
        mesh = jax.make_mesh((devices,), ("model",), devices=jax.devices()[:devices])
    session = InferenceSession(
        path, mesh=mesh, disabled_optimizers=list(filter(None, disabled.split(",")))
    )
    prompt = np.random.default_rng(0).integers(1, 1000, size=(1, prompt_len))
    out: dict = {}
    t = time.perf_counter()
    sizes = [int(b) for b in buckets.split(",")] if buckets else None
    dml_generation(session, prompt, new, steps=steps, buckets=sizes)
    dml_generation(session, prompt, new, per_token=True, buckets=sizes)
    out["warmup_s"] = time.perf_counter() - t
    # each decode program's graph rewrites and attention nodes (whether its attention became
    # one MULTIHEAD_ATTENTION node, which the decode-step attention kernel takes)
    out["graphs"] = [
        {
            "past": max((s[2] for s in key[0] if len(s) == 4), default=0),
            "optimizations": dict(p.imported.optimizations),
            "attention_nodes": sum("ATTENTION" in n.operator_type for n in p.imported.graph.nodes),
        }
        for key, p in session._programs.items()
        if p.imported.graph is not None
    ]
    out["attention_declined"] = dict(declined)
    for per_token in (False, True):
        rates = []
        for _ in range(samples):
            toks, _, dec, _ = dml_generation(session, prompt, new, per_token, steps, sizes)
            rates.append((toks.shape[1] - 1) / dec)
        out["per_token" if per_token else "loop"] = {
            "tok_s_median": float(np.median(rates)),
            "min": float(min(rates)),
            "max": float(max(rates)),
        }
    # the host's share of a token in the dispatch-a-token loop: the time to issue the steps
    # (no sync between them) against the time until the last one is done
    from dml_jax.onnx.generation import Generator, GeneratorParams

    host = []
    for _ in range(samples):
        options = {} if sizes is None else {"buckets": sizes}
        params = GeneratorParams(session, max_length=prompt_len + new, batch_size=1, **options)
        g = Generator(session, params)
        g.append_tokens(prompt)
        g.generate_next_token()  # the prefill's token shown: each later call a dispatch
        jax.block_until_ready(g._tokens)
        t0, n = time.perf_counter(), 0
        while not g.is_done():
            g.generate_next_token()
            n += 1
        t1 = time.perf_counter()
        jax.block_until_ready(g._tokens)
        host.append(((t1 - t0) / n * 1e6, (time.perf_counter() - t0) / n * 1e6))
    out["per_token_host_us"] = {"issue": float(np.median([h[0] for h in host])),
                                "done": float(np.median([h[1] for h in host]))}  # fmt: skip
    for per_token in (False, True):  # the first GPU's kernels a token (on a mesh too)
        made: list = []
        folder = gpu_trace.record(
            lambda p=per_token: made.append(
                dml_generation(session, prompt, new, p, steps, sizes)[0]
            ),
            1,
        )
        key = "profile_per_token" if per_token else "profile_loop"
        out[key] = gpu_trace.kernels(folder, made[0].shape[1])
    return out


def attention_form(form: str) -> None:
    """A decode step's attention (one query position) in this process: ``decode``, the
    decode-step kernel (``kernels/decode_attention.py``, the library's default; ``decode:N``,
    its rows split every N keys, ``SPLIT_KEYS``); ``cudnn``, the kernel off, so cuDNN's path
    takes the step; ``lax``, neither (the lax lowering of the fused node)."""
    import dataclasses

    from dml_jax import fastpath
    from dml_jax.errors import Validator
    from dml_jax.kernels import decode_attention
    from dml_jax.ops import attention

    def one_query(d):
        return attention.analyze(d, Validator(d.operator_type)).seq == 1

    form, _, split = form.partition(":")
    decode_attention.ON = form == "decode"
    if split:
        decode_attention.SPLIT_KEYS = int(split)
    if form != "lax":
        return
    for name in ("MULTIHEAD_ATTENTION", "MULTIHEAD_ATTENTION1"):
        paths = fastpath._FAST_PATHS[f"DML_OPERATOR_{name}"]
        cudnn = paths["cudnn"]
        paths["cudnn"] = dataclasses.replace(
            cudnn, applies=lambda d, f=cudnn.applies: f(d) and not one_query(d)
        )


def _models_dir(keep: str, builder: bool) -> str:
    """``keep``'s folder for this form's exports, named by a hash of the code that writes them
    (``dml_jax/bench/decoders.py`` and ``model_builder.py``): a change there exports again."""
    import hashlib

    from dml_jax.bench import decoders

    digest = hashlib.sha256()
    for name in ("decoders.py", "model_builder.py"):
        with open(os.path.join(os.path.dirname(decoders.__file__), name), "rb") as f:
            digest.update(f.read())
    folder = os.path.join(keep, f"{'builder' if builder else 'export'}-{digest.hexdigest()[:12]}")
    os.makedirs(folder, exist_ok=True)
    return folder


def summarize_dump(folder: str, key: str) -> None:
    """Keeps only the largest optimized HLO module of a process's decode steps of each form (a
    run of steps, its loop body: the module holds a loop; a step a dispatch: it holds none;
    at most two files a process, as few come back from the GPU machine) and prints their
    kernels."""
    import hlo_kernels  # this folder's

    kept = []
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if name.endswith("after_optimizations.txt") and "steps" in name:
            kept.append(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    forms: dict[bool, list] = {}
    for path in kept:
        with open(path) as f:
            forms.setdefault(" while(" in f.read(), []).append(path)
    for looped, paths in sorted(forms.items()):
        path = max(paths, key=os.path.getsize)
        for other in paths:
            if other != path:
                os.remove(other)
        with open(path) as f:
            comps = hlo_kernels.computations(f.read())
        body = (hlo_kernels.loop_body(comps) if looped else None) or "ENTRY"
        launches = hlo_kernels.kernels(comps, body)
        form = "a run of steps" if looped else "one step"
        print(f"{key}: {os.path.basename(path)} ({form}): {len(launches)} launches a step",
              flush=True)  # fmt: skip
        counts = hlo_kernels.collections.Counter(map(hlo_kernels.signature, launches))
        for sig, count in counts.most_common(40):
            print(f"  {count:4d}  {sig[:160]}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--child", default=None)
    p.add_argument("--samples", type=int, default=5)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--int4", action="store_true")
    p.add_argument("--flags", nargs="*", default=list(FLAGS))
    p.add_argument("--int4-tiles", nargs="*", default=[""],
                   help="int4 processes, one a tunables set each ('' the defaults; "
                        "'one_row=1,block_n=128')")  # fmt: skip
    p.add_argument("--tiles", default="", help=argparse.SUPPRESS)
    for flag, (_, _, what) in VARIANTS.items():
        p.add_argument(flag, nargs="*", default=[""], help=f"processes, one a {what} each")
    p.add_argument("--devices", type=int, default=1,
                   help="float16 also on a 'model' mesh of this many GPUs (kernels of the first)")  # fmt: skip
    p.add_argument("--int4-only", action="store_true",
                   help="with --int4: no float16 process (the float16 export is still made: "
                        "the int4 one is its quantization)")  # fmt: skip
    p.add_argument("--mesh-only", action="store_true",
                   help="with --devices: the mesh runs alone, not the one-GPU ones")  # fmt: skip
    p.add_argument("--dump-hlo", action="store_true",
                   help="each process's optimized HLO of its decode steps into $OUT/hlo-N, and "
                        "its kernels summarized (hlo_kernels.py)")  # fmt: skip
    p.add_argument("--builder", action="store_true",
                   help="the 1B model in ONNX Runtime GenAI's model-builder form "
                        "(dml_jax.bench.model_builder: GroupQueryAttention, its Skip norms) "
                        "instead of PyTorch's export")  # fmt: skip
    p.add_argument("--keep", default=None,
                   help="a folder where the exports are kept and found again by a later run "
                        "(one a form and version of the exporting code; bench_out/ is ignored "
                        "by git, so the GPU machine keeps it between calls while it is held)")  # fmt: skip
    p.add_argument("--steps", type=int, default=None,
                   help="GeneratorParams.steps_per_dispatch of the 'loop' generations "
                        "(default: the library's)")  # fmt: skip
    a = p.parse_args()
    if a.child:
        if a.attention and a.attention[0]:
            attention_form(a.attention[0])
        first = {attr: (getattr(a, attr) or [""])[0] for attr, _, _ in VARIANTS.values()}
        print(json.dumps(child(a.child, a.samples, a.new, a.prompt, a.tiles, a.steps,
                               a.devices, first["one_row_form"], first["set"],
                               first["disable"], first["buckets"])))  # fmt: skip
        return
    import torch

    from dml_jax.bench import decoders

    tmp = tempfile.mkdtemp()
    models = _models_dir(a.keep, a.builder) if a.keep else tmp
    f16, int4 = os.path.join(models, "fp16.onnx"), os.path.join(models, "int4.onnx")
    if not os.path.exists(f16):
        model = decoders.build("llama_1b").half().cuda()
        t = time.perf_counter()
        if a.builder:
            from dml_jax.bench import model_builder

            model_builder.export(model, f16 + ".part", np.float16)
        else:
            decoders.export(model, f16 + ".part", device="cuda")
        os.replace(f16 + ".part", f16)  # (its weights' file keeps the name the export gave it)
        print(f"export {time.perf_counter() - t:.1f} s", flush=True)
        del model
        torch.cuda.empty_cache()
    files = {"float16": f16}
    if a.int4:
        if not os.path.exists(int4):
            t = time.perf_counter()
            decoders.quantize_int4(f16, int4 + ".part")
            os.replace(int4 + ".part", int4)
            print(f"quantize {time.perf_counter() - t:.1f} s", flush=True)
        files["int4"] = int4
    results = {}

    def variants(*flags):  # every combination of the given per-process options
        lists = [getattr(a, VARIANTS[f][0]) for f in flags]
        return [dict(zip(flags, values)) for values in itertools.product(*lists)]

    every = [f for f in VARIANTS if f != "--one-row-form"]  # the one-row form: float16 only
    runs = [("float16", f, "", 1, v) for f in a.flags for v in variants(*VARIANTS)]
    runs = [] if (a.mesh_only and a.devices > 1) or (a.int4_only and a.int4) else runs
    if "int4" in files:
        runs += [("int4", a.flags[0], t, 1, v) for t in a.int4_tiles for v in variants(*every)]
    if a.devices > 1:
        runs += [("float16", f, "", a.devices, {}) for f in a.flags]
    for n, (dtype, flag, tiles, devices, chosen) in enumerate(runs):
        path = files[dtype]
        env = dict(os.environ, XLA_FLAGS=FLAGS[flag])
        dump = os.path.join(os.environ.get("OUT", tmp), f"hlo-{n}")
        if a.dump_hlo:
            env["XLA_FLAGS"] += (f" --xla_dump_to={dump} --xla_dump_hlo_as_text"
                                 " --xla_dump_hlo_module_re=.*steps.*")  # fmt: skip
        cmd = [
            sys.executable,
            __file__,
            "--child",
            path,
            "--samples",
            str(a.samples),
            "--new",
            str(a.new),
            "--prompt",
            str(a.prompt),
            "--tiles",
            tiles,
        ]
        cmd += [] if a.steps is None else ["--steps", str(a.steps)]  # fmt: skip
        cmd += ["--devices", str(devices)]
        chosen = {f: value for f, value in chosen.items() if value}
        cmd += [x for f, value in chosen.items() for x in (f, value)]
        t = time.perf_counter()
        r = subprocess.run(cmd, check=False, env=env, capture_output=True, text=True)
        key = f"{dtype} {flag}" + (f" [{tiles}]" if tiles else "")
        key += "" if a.steps is None else f" steps {a.steps}"
        key += "" if devices == 1 else f" on {devices} GPUs"
        key += "".join(VARIANTS[f][1].format(value) for f, value in chosen.items())
        if r.returncode:
            results[key] = {"error": r.stderr[-2000:]}
        else:
            results[key] = json.loads(r.stdout.strip().splitlines()[-1])
        results[key]["process_s"] = time.perf_counter() - t
        print(key, json.dumps(results[key]), flush=True)
        if a.dump_hlo and os.path.isdir(dump):
            summarize_dump(dump, key)
        if os.environ.get("OUT"):  # after each process: a run cut short keeps its rows
            with open(os.path.join(os.environ["OUT"], "decode_step.json"), "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
