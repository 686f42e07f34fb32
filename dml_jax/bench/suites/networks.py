"""The networks suite: ResNet-50 and a GPT-style block stack as DML graphs, against PyTorch.

The networks are ``examples/networks.py``'s: one ``GraphDesc`` each, compiled by
``compile_graph`` into one XLA program (``Network.compile``: element-wise GPU fast paths off, so
XLA fuses the element-wise nodes into the convolutions and products around them). The PyTorch
side is the same network written with ``torch.nn`` and carrying the same weights:

- ResNet-50 in torchvision's layout, channels_last, ``cudnn.benchmark`` on, batch normalization
  folded into the convolutions (``fuse_conv_bn_eval``), which is what the DML graph computes;
- the GPT stack with ``nn.Linear``, ``nn.LayerNorm``, exact ``nn.GELU`` and
  ``scaled_dot_product_attention(is_causal=True)`` (FlashAttention in float16), where the DML
  graph has one MULTIHEAD_ATTENTION node per layer with the causal mask as a BOOLEAN MaskTensor
  from a constant data node (``--gpt-mask input``: a graph input tested at run time)
  (cuDNN's fused attention on CUDA in float16; ``cudnn_attention_calls`` in a ``dml`` row counts
  its calls in the lowered program);
- eager, and ``torch.compile`` (default mode) where it works, at the cases ``--torch-compile``
  names.

float32 is float32 on both sides (TF32 off in PyTorch; dml_jax computes FLOAT32 products in
float32 unless ALLOW_HALF_PRECISION_COMPUTATION is given), and the float32 cases record the
agreement with PyTorch: max |dml - torch| / max |torch| over the outputs.

Every hot time is the median of samples, each many dispatches followed by one sync; ``cold_s``
is the first call (trace + compile + run for dml_jax and torch.compile, cuDNN's algorithm search
for eager). Cases run in priority order (float16 throughput first) and stop at ``--budget-s``.

``--devices N`` times scaling out instead, with JAX's own sharding: ResNet-50 data-parallel (the
batch split over N devices, weights replicated; at the same per-device batch and at the same
global batch) and the GPT stack tensor-parallel (Megatron's split of the projections), each
against one device and checked against the one-device result.

``--quick``: the examples' small networks at batch 2 (any backend).
"""

from __future__ import annotations

import gc
import time
import traceback
from typing import Any

from ..harness import Run, cold_time, error_text, examples_module


def add_arguments(p: Any) -> None:
    p.add_argument("--devices", type=int, default=1, help="N > 1: the scaling run on N devices")
    p.add_argument("--resnet-batch", type=int, default=256, help="ResNet throughput batch")
    p.add_argument("--gpt-batch", type=int, default=8, help="GPT throughput batch")
    p.add_argument("--gpt-seq", type=int, default=1024)
    p.add_argument("--gpt-d-model", type=int, default=1024)
    p.add_argument("--gpt-heads", type=int, default=16)
    p.add_argument("--gpt-layers", type=int, default=12)
    p.add_argument(
        "--gpt-qkv",
        choices=("fused", "separate"),
        default="fused",
        help="the GPT's query/key/value projections: one stacked GEMM or three (gpt_stack's "
        "fused_qkv)",
    )
    p.add_argument(
        "--gpt-mask",
        choices=("constant", "input"),
        default="constant",
        help="the GPT's causal mask: a constant data node (recognized as causal when compiled) "
        "or a graph input (tested at run time; gpt_stack's mask_input)",
    )
    p.add_argument(
        "--torch-compile",
        choices=("throughput", "all", "none"),
        default="throughput",
        help="cases timed with torch.compile (default: the float16 throughput batches)",
    )
    p.add_argument(
        "--only",
        help="comma-separated substrings: run only the cases whose label (e.g. "
        "'resnet50 FLOAT16 batch 256') contains one",
    )


NOTES = [
    (
        "ResNet-50: dml graph with batch normalization folded into the convolutions; "
        "PyTorch channels_last, cudnn.benchmark, folded too (fuse_conv_bn_eval)"
    ),
    (
        "GPT: dml has one MULTIHEAD_ATTENTION node per layer (stacked QKV from one fused "
        "projection, causal mask as a BOOLEAN MaskTensor with MaskFilterValue -inf, a constant "
        "data node unless --gpt-mask input); PyTorch uses "
        "scaled_dot_product_attention(is_causal=True)"
    ),
    "float32: TF32 off in PyTorch, full float32 products in dml_jax",
    (
        "dml: Network.compile() (compile_graph's defaults); 'dml lax' is the same graph with "
        "fast_paths=False"
    ),
    (
        "'dml lax half precision': 'dml lax' with ALLOW_HALF_PRECISION_COMPUTATION, which rounds the "
        "GPT's float16 attention logits and softmax exponentials to float16 as the jax reference "
        "rounds its logits and probabilities "
        "('dml lax' computes them in float32, docs/semantics.md)"
    ),
    (
        "'dml lax cpu', 'jax reference cpu': 'dml lax' and the jax reference in float32 on jax's "
        "CPU device of the same host, in the same run"
    ),
]


def run(run: Run) -> int:
    run.report["notes"] = NOTES
    torch = run.torch
    if torch is not None:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    if run.args.devices > 1:
        scaling(run, run.args.devices)
    else:
        single_device(run)
    return 0


def _skip_reason(run: Run) -> str:
    return f"time budget {run.args.budget_s} s"


def torch_resnet(torch, width: int, layers, classes: int):
    """ResNet-50 (v1.5) as torchvision writes it, at any width, depth and class count."""
    nn = torch.nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            identity = x if self.downsample is None else self.downsample(x)
            return self.relu(out + identity)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inplanes = width
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
            for i, blocks in enumerate(layers):
                setattr(self, f"layer{i + 1}", self._make_layer(width * 2**i, blocks, 1 + (i > 0)))
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(self.inplanes, classes)
            self.stages = len(layers)

        def _make_layer(self, planes, blocks, stride):
            downsample = None
            if stride != 1 or self.inplanes != planes * 4:
                downsample = nn.Sequential(
                    nn.Conv2d(self.inplanes, planes * 4, 1, stride, bias=False),
                    nn.BatchNorm2d(planes * 4),
                )
            mods = [Bottleneck(self.inplanes, planes, stride, downsample)]
            self.inplanes = planes * 4
            mods += [Bottleneck(self.inplanes, planes, 1, None) for _ in range(1, blocks)]
            return nn.Sequential(*mods)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for i in range(self.stages):
                x = getattr(self, f"layer{i + 1}")(x)
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def fold_batch_norm(torch, model):
    """Every Conv2d + BatchNorm2d pair as one convolution with a bias (eval mode)."""
    fuse = torch.nn.utils.fusion.fuse_conv_bn_eval
    model.conv1, model.bn1 = fuse(model.conv1, model.bn1), torch.nn.Identity()
    for module in model.modules():
        if hasattr(module, "conv3"):
            for i in (1, 2, 3):
                conv, bn = getattr(module, f"conv{i}"), getattr(module, f"bn{i}")
                setattr(module, f"conv{i}", fuse(conv, bn))
                setattr(module, f"bn{i}", torch.nn.Identity())
            if module.downsample is not None:
                conv, bn = module.downsample
                module.downsample = torch.nn.Sequential(fuse(conv, bn))
    return model


def torch_gpt(torch, d_model: int, heads: int, layers: int, ffn: int):
    """The pre-LN causal stack with PyTorch's own modules and SDPA."""
    nn = torch.nn
    sdpa = torch.nn.functional.scaled_dot_product_attention

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.out = (nn.Linear(d_model, d_model) for _ in range(4))

        def forward(self, x):
            b, s, d = x.shape

            def split(t):
                return t.view(b, s, heads, d // heads).transpose(1, 2)

            o = sdpa(split(self.q(x)), split(self.k(x)), split(self.v(x)), is_causal=True)
            return self.out(o.transpose(1, 2).reshape(b, s, d))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(d_model, ffn), nn.Linear(ffn, d_model)
            self.gelu = nn.GELU()

        def forward(self, x):
            return self.fc2(self.gelu(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
            self.attn, self.mlp = Attention(), Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d_model)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.ln_f(x)

    return Gpt()


def _load(torch, model, parameters: dict):
    state = {k: torch.from_numpy(v) for k, v in parameters.items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model.eval()


# ---------------------------------------------------------------------------------------------
# Cases


def _relative_error(got, want) -> float:
    import numpy as np

    got = np.asarray(got, np.float64).reshape(np.shape(want))
    want = np.asarray(want, np.float64)
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def _per_second(network: str, config: dict, seconds: float) -> dict:
    if network == "resnet50":
        return {"images_per_s": round(config["batch"] / seconds, 1)}
    return {"tokens_per_s": round(config["batch"] * config["seq"] / seconds, 1)}


def _build(args, network: str, dtype: str, batch: int):
    networks = examples_module("networks")

    if network == "resnet50":
        extra = networks.SMALL_RESNET if args.quick else {}
        return networks.resnet50(batch, dtype, **extra)
    fused = args.gpt_qkv == "fused"
    extra = {"fused_qkv": fused, "mask_input": args.gpt_mask == "input"}
    if args.quick:
        return networks.gpt_stack(batch, dtype=dtype, **extra, **networks.SMALL_GPT)
    return networks.gpt_stack(
        batch,
        args.gpt_seq,
        args.gpt_d_model,
        args.gpt_heads,
        args.gpt_layers,
        dtype,
        **extra,
    )


def run_case(run: Run, network: str, dtype: str, batch: int, impls: tuple[str, ...]) -> None:
    """Times ``impls`` on one network, data type and batch; one row per implementation."""
    import jax
    import numpy as np

    args = run.args
    base = {"network": network, "dtype": dtype, "batch": batch}
    if run.over_budget():
        run.add(dict(base, impl=",".join(impls), skipped=_skip_reason(run)))
        return
    t = time.perf_counter()
    net = _build(args, network, dtype, batch)
    x = net.example_data()["x"]
    base["build_s"] = round(time.perf_counter() - t, 2)
    config = dict(net.config)
    if network == "gpt":
        base["tokens"] = config["batch"] * config["seq"]
    outputs: dict[str, np.ndarray] = {}
    rows = []
    for impl in impls:
        row = dict(base, impl=impl)
        rows.append(row)
        if impl.startswith("torch") and run.torch is None:
            row["skipped"] = "no PyTorch on CUDA (see skipped)"
        elif run.over_budget():
            row["skipped"] = _skip_reason(run)
        else:
            try:
                call, sync = _implementation(run, net, impl, x)
                if impl == "dml":
                    row["cudnn_attention_calls"] = _cudnn_attention_calls(net)
                cold, out = cold_time(call, sync)
                hot = run.timer.run(call, sync)
                outputs[impl] = _to_numpy(run, out)
                row.update(cold_s=round(cold, 3), hot_s=hot, **_per_second(network, config, hot))
            except Exception as e:
                row["error"] = error_text(e, 800)
                row["error_trace"] = traceback.format_exc()[-3000:]
            call = sync = out = None
            if impl == "torch.compile":
                run.torch._dynamo.reset()  # its compiled graphs hold the model's weights
            gc.collect()
        run.add(row)
    reference = outputs.get("torch eager")
    if reference is not None:
        for row in rows:
            if row["impl"] in outputs and row["impl"] != "torch eager":
                row["max_rel_err_vs_torch"] = _relative_error(outputs[row["impl"]], reference)
        run.write()
    del net, outputs
    gc.collect()
    if run.torch is not None:
        run.torch.cuda.empty_cache()
    jax.clear_caches()


def _cudnn_attention_calls(net) -> int | str:
    """How many cuDNN fused-attention calls the lowered program of ``net.compile()`` makes (the
    fast path of MULTIHEAD_ATTENTION; 0 off CUDA or where the lax lowering computes it)."""
    import jax

    try:
        shapes = [jax.ShapeDtypeStruct(t.sizes, t.dtype) for t in net.input_descs]
        return jax.jit(net.compile().fn).lower(*shapes).as_text().count("__cudnn$fmha")
    except Exception as e:  # a diagnostic: the timing still runs
        return f"{type(e).__name__}: {str(e)[:200]}"


def _to_numpy(run: Run, out):
    import numpy as np

    if run.torch is not None and isinstance(out, run.torch.Tensor):
        return out.float().cpu().numpy()
    return np.asarray(out, np.float32)


def _implementation(run: Run, net, impl: str, x):
    """(call, sync) for one implementation of ``net`` on input ``x``."""
    import jax
    import jax.numpy as jnp

    from ..harness import jax_sync

    networks = examples_module("networks")
    # "... cpu": the same implementation on jax's CPU device (its arrays committed there, so the
    # programs compile for and run on it), in the same process as the accelerator's rows.
    device = jax.devices("cpu")[0] if impl.endswith(" cpu") else None
    impl = impl.removesuffix(" cpu")
    if impl in ("dml", "dml lax", "dml lax half precision"):
        g = net.compile(
            fast_paths=impl == "dml", allow_half_precision=impl == "dml lax half precision"
        )
        args = [jax.device_put(a, device) for a in net.arguments(x=x)]
        return (lambda: g(*args)), jax_sync
    if impl == "jax reference":
        dtype = jnp.float16 if net.config["dtype"] == "FLOAT16" else jnp.float32
        # Weights in the network's type, as the graph gets them (the reference widens them
        # where it computes in float32; a float16 -> float32 -> float16 round trip folds away).
        params = {k: jax.device_put(v.astype(dtype), device) for k, v in net.parameters.items()}
        c = net.config
        if net.name == "resnet50":
            fn = jax.jit(lambda p, x: networks.resnet_reference(p, x, c["layers"], dtype))
        else:
            fn = jax.jit(
                lambda p, x: networks.gpt_reference(
                    p, x, c["batch"], c["heads"], c["layers"], dtype
                )
            )
        xd = jax.device_put(x, device)
        return (lambda: fn(params, xd)), jax_sync
    torch = run.torch
    tdtype = torch.float16 if net.config["dtype"] == "FLOAT16" else torch.float32
    c = net.config
    if net.name == "resnet50":
        model = torch_resnet(torch, c["width"], c["layers"], c["classes"])
        model = fold_batch_norm(torch, _load(torch, model, net.parameters))
        model = model.to("cuda", tdtype).to(memory_format=torch.channels_last)
        tx = torch.from_numpy(x).to("cuda").contiguous(memory_format=torch.channels_last)
    else:
        model = torch_gpt(torch, c["d_model"], c["heads"], c["layers"], c["ffn"])
        model = _load(torch, model, net.parameters).to("cuda", tdtype)
        tx = torch.from_numpy(x).to("cuda").reshape(c["batch"], c["seq"], c["d_model"])
    if impl == "torch.compile":
        model = torch.compile(model)

    def call():
        with torch.inference_mode():
            return model(tx)

    return call, run.torch_sync


def single_device(run: Run) -> None:
    args = run.args
    rb, gb = (2, 2) if args.quick else (args.resnet_batch, args.gpt_batch)
    both, compile_all = ("dml", "torch eager"), args.torch_compile == "all"

    def with_compile(impls, throughput):
        if compile_all or (throughput and args.torch_compile == "throughput"):
            return impls + ("torch.compile",)
        return impls

    # Priority order (a run stops starting cases at --budget-s): the goals' float16 throughput
    # cases, the float32 agreement at batch 1, torch.compile at the throughput batches (a minute
    # of compilation each; the GPT's first, its goal names torch.compile), batch 1, float32 throughput, then the measurements that document
    # choices (every node on its lax lowering; jax without DML descriptors).
    plan = [
        ("resnet50", "FLOAT16", rb, both),
        ("gpt", "FLOAT16", gb, both),
        ("resnet50", "FLOAT32", 1, both),
        ("gpt", "FLOAT32", 1, both),
        ("gpt", "FLOAT16", gb, with_compile((), True)),
        ("resnet50", "FLOAT16", rb, with_compile((), True)),
        ("resnet50", "FLOAT16", 1, with_compile(both, False)),
        ("gpt", "FLOAT16", 1, with_compile(both, False)),
        ("resnet50", "FLOAT32", rb, with_compile(both, False)),
        ("resnet50", "FLOAT16", rb, ("dml lax", "jax reference")),
        ("gpt", "FLOAT16", gb, ("dml lax", "dml lax half precision", "jax reference")),
        # The portable path against plain jax on the host's CPU, in float32 (the CPU's type):
        # one image, and one sequence of the GPT's timed length.
        ("resnet50", "FLOAT32", 1, ("dml lax cpu", "jax reference cpu")),
        ("gpt", "FLOAT32", 1, ("dml lax cpu", "jax reference cpu")),
    ]
    if args.quick and not args.only:  # the harness's smoke test: one case per network
        plan = plan[:2]
    wanted = args.only.split(",") if args.only else None
    for network, dtype, batch, which in plan:
        label = f"{network} {dtype} batch {batch}"
        if which and (wanted is None or any(w.strip() in label for w in wanted)):
            run_case(run, network, dtype, batch, which)


def scaling(run: Run, count: int) -> None:
    """ResNet data-parallel and GPT tensor-parallel on ``count`` devices against one."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from ... import hlo
    from ..harness import jax_sync

    networks = examples_module("networks")
    args = run.args
    devices = jax.devices()
    if len(devices) < count:
        run.skip(f"--devices {count}", f"only {len(devices)} devices")
        return
    mesh = jax.make_mesh((count,), ("x",), devices=devices[:count])
    one = jax.make_mesh((1,), ("x",), devices=devices[:1])
    rb, gb = (2, 2) if args.quick else (args.resnet_batch, args.gpt_batch)
    # (label, network, batch, mesh, data axis, model axis, output spec)
    plan = [
        ("1 device", "resnet50", rb, one, "x", None, P("x")),
        (f"{count} devices, data-parallel, same per-device batch", "resnet50", rb * count,
         mesh, "x", None, P("x")),
        (f"{count} devices, data-parallel, same global batch", "resnet50", rb, mesh, "x", None,
         P("x")),
        ("1 device", "gpt", gb, one, None, "x", P()),
        (f"{count} devices, tensor-parallel", "gpt", gb, mesh, None, "x", P()),
        # the tokens split too between the products that read them whole (input and output
        # rows over the mesh): in lax, all-gathers before the split products and sums scattered
        # after; with the GEMM kernel per shard, the weights gathered instead where they are
        # the smaller operand (docs/scaling.md; the row's collectives say which)
        (f"{count} devices, tensor-parallel, sequence-parallel", "gpt", gb, mesh, "x", "x",
         P("x", None)),
    ]  # fmt: skip
    first: dict[str, tuple[float, np.ndarray]] = {}
    for label, network, batch, m, data_axis, model_axis, out_spec in plan:
        row = {"network": network, "dtype": "FLOAT16", "batch": batch, "impl": "dml",
               "devices": m.size, "layout": label}  # fmt: skip
        if run.over_budget():
            row["skipped"] = _skip_reason(run)
            run.add(row)
            continue
        try:
            net = _build(args, network, "FLOAT16", batch)
            x = net.example_data()["x"]
            ins = networks.shardings(net, m, data_axis, model_axis)
            g = net.compile(in_shardings=ins, out_shardings=NamedSharding(m, out_spec))
            values = [jax.device_put(a, s) for a, s in zip(net.arguments(x=x), ins)]
            cold, out = cold_time(lambda: g(*values), jax_sync)
            hot = run.timer.run(lambda: g(*values), jax_sync)
            result = np.asarray(out, np.float32)
            row.update(cold_s=round(cold, 3), hot_s=hot, **_per_second(network, net.config, hot))
            row["output_sharding"] = str(out.sharding.spec)
            if m.size > 1:  # what the split program communicates, as compiled
                row["collectives"] = hlo.collectives(hlo.optimized_hlo(g, *values))
            if network not in first:
                first[network] = (row[_rate_key(network)], result)
            else:
                rate, base = first[network]
                row["speedup_vs_1_device"] = round(row[_rate_key(network)] / rate, 3)
                # The examples are seeded: the first images / tokens are the same ones.
                n = base.shape[0]
                row["max_rel_err_vs_1_device"] = _relative_error(result[:n], base)
            del net, g, values, out
        except Exception as e:
            row["error"] = error_text(e, 800)
            row["error_trace"] = traceback.format_exc()[-3000:]
        gc.collect()
        jax.clear_caches()
        run.add(row)


def _size(count: int) -> str:
    """Bytes as B, KiB or MiB."""
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:,.0f} {unit}"
    return f"{count} B"


def _rate_key(network: str) -> str:
    return "images_per_s" if network == "resnet50" else "tokens_per_s"


def table(report: dict) -> list[str]:
    lines = [
        (
            "Images/s (ResNet-50) or tokens/s (GPT stack); `rel err`: max |dml - torch| / "
            "max |torch| over the outputs (float32 at batch 1)."
        ),
        "",
        "| network | dtype | batch | implementation | per s | cold s | rel err | note |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        rate = r.get("images_per_s", r.get("tokens_per_s"))
        rate = f"{rate:,.0f}" if rate else "-"
        note = r.get("skipped") or (r.get("error") or "")[:60] or r.get("layout", "")
        if "speedup_vs_1_device" in r:
            note += f" speed-up {r['speedup_vs_1_device']}"
        if r.get("collectives"):
            note += "; " + ", ".join(
                f"{c['count']} {kind} ({_size(c['bytes'])})" for kind, c in r["collectives"].items()
            )
        elif "collectives" in r:
            note += "; no collective"
        err = r.get("max_rel_err_vs_torch")
        err = f"{err:.1e}" if isinstance(err, float) else ""
        cold = r.get("cold_s", "")
        lines.append(
            f"| {r['network']} | {r['dtype']} | {r['batch']} | {r['impl']} | {rate} | {cold} | "
            f"{err} | {note} |"
        )
    return lines
