"""The training suite: steps per second of the CNN of examples/train_cnn.py, three ways.

- ``dml gradient operators``: the example's training graph (forward pass, backward pass written
  with DirectML's gradient operators, four ADAM_OPTIMIZER nodes), one jitted step;
- ``jax.grad``: ``jax.value_and_grad`` of the example's forward graph and the same four
  ADAM_OPTIMIZER operators, one jitted step;
- ``PyTorch eager``: the same model written with ``torch.nn.functional`` (conv2d with the 1x3
  filters, batch_norm in training mode, relu, max_pool2d 1x2, a batched matmul per channel, a
  sum over the channels, log_softmax and the cross-entropy), ``loss.backward()`` and
  ``torch.optim.Adam`` with the same hyper-parameters, float32 without TF32 (dml_jax computes
  FLOAT32 convolutions and GEMMs in full float32). Skipped when PyTorch is absent; on the CPU
  when it sees no GPU.

Default size: a batch of 256 signals of 3,072 samples (the values of a 32x32x3 image as one
row), 16 filters, 10 classes; Adam's learning rate 1e-4 (the example's 0.05 makes the loss jump
a hundredfold in the first step at this fan-in). ``cold_s`` is the first step (trace, compile,
run); ``--quick``: the example's own sizes and learning rate. The sanity rows (not a test) start the three from the same
weights and data and list their losses over the first steps: equal at step 1 up to float32
rounding, close after (PyTorch's Adam adds epsilon to sqrt(v) / sqrt(1 - beta2^t), DirectML's
to sqrt(v), a difference of order epsilon = 1e-7).
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import jax
import jax.numpy as jnp

import dml_jax as dml

from ..harness import Run, error_text, examples_module


def dml_graph_step(ex, sizes, x, labels, lr):
    """The training graph with DirectML's gradient operators and ADAM_OPTIMIZER."""
    graph = dml.compile_graph(ex.training_graph(sizes, lr))

    def step(state, x, labels):
        params, first, second, t = state
        out = graph.fn(x, labels, *params, *first, *second, t)
        return (tuple(out[1:5]), tuple(out[5:9]), tuple(out[9:13]), t + 1), out[0].reshape(())

    return _jax_runner(jax.jit(step, donate_argnums=0), x, labels)


def jax_grad_step(ex, sizes, x, labels, lr):
    """``jax.value_and_grad`` of the forward graph, then the four ADAM_OPTIMIZER operators."""
    loss = dml.compile_graph(ex.loss_graph(sizes))
    adam = [dml.compile_operator(ex.adam_desc(t, lr)) for t in sizes.parameter_descs]

    def step(state, x, labels):
        params, first, second, t = state
        value, grads = jax.value_and_grad(lambda p: loss.fn(x, labels, *p).reshape(()))(params)
        updated = [op.fn(*a, t) for op, *a in zip(adam, params, first, second, grads)]
        params, first, second = (tuple(column) for column in zip(*updated))
        return (params, first, second, t + 1), value

    return _jax_runner(jax.jit(step, donate_argnums=0), x, labels)


def _jax_runner(step, x, labels):
    x, labels = jnp.asarray(x), jnp.asarray(labels)

    def init(parameters):
        params = tuple(jnp.asarray(p) for p in parameters)
        first, second = (tuple(jnp.zeros_like(p) for p in params) for _ in range(2))
        return params, first, second, jnp.ones((1, 1, 1, 1), jnp.uint32)  # Adam counts from 1

    return init, lambda state: step(state, x, labels), jax.block_until_ready


def torch_step(ex, sizes, x, labels, lr, torch):
    """The same model and Adam in PyTorch eager, on the GPU when PyTorch sees one."""
    f = torch.nn.functional
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tx = torch.from_numpy(x).to(device)
    tl = torch.from_numpy(labels).to(device)

    def loss_of(w1, scale, bias, w2):
        conv = f.conv2d(tx, w1, padding=(0, 1))  # {1, K, N, L}
        bn = f.batch_norm(
            conv, None, None, scale.reshape(-1), bias.reshape(-1), training=True, eps=1e-3
        )
        pooled = f.max_pool2d(f.relu(bn), kernel_size=(1, 2), stride=(1, 2))  # {1, K, N, F}
        logits = torch.matmul(pooled, w2).sum(dim=1, keepdim=True)  # {1, 1, N, C}
        return -(tl * f.log_softmax(logits, dim=-1)).sum() / sizes.n

    def init(parameters):
        params = [torch.tensor(p, device=device, requires_grad=True) for p in parameters]
        opt = torch.optim.Adam(params, lr=lr, betas=(ex.BETA1, ex.BETA2), eps=ex.EPSILON)
        return params, opt

    def step(state):
        params, opt = state
        opt.zero_grad(set_to_none=True)
        loss = loss_of(*params)
        loss.backward()
        opt.step()
        return state, loss.detach()

    def sync(_):
        if device.type == "cuda":
            torch.cuda.synchronize()

    return init, step, sync


# ---------------------------------------------------------------------------------------------


def _torch(run: Run):
    """PyTorch on the GPU when it sees one, else on the CPU (the sanity rows need no GPU)."""
    if run.args.no_torch:
        run.skip("PyTorch eager", "--no-torch")
        return None
    try:
        import torch
    except ImportError as e:
        run.skip("PyTorch eager", f"not importable: {e}")
        return None
    return torch


def _measure(run: Run, ex, sizes, lr: float, sanity_steps: int) -> dict:
    timer = run.timer
    x, labels = ex.synthetic_data(0, sizes)
    start = ex.initial_parameters(1, sizes)
    torch = _torch(run)
    ways = {
        "dml gradient operators": lambda: dml_graph_step(ex, sizes, x, labels, lr),
        "jax.grad": lambda: jax_grad_step(ex, sizes, x, labels, lr),
    }
    if torch is not None:
        ways["PyTorch eager"] = lambda: torch_step(ex, sizes, x, labels, lr, torch)
    losses = {}
    for name, make in ways.items():
        row = dict(way=name)
        try:
            init, step, sync = make()
            state = init(start)
            trace = []
            t = time.perf_counter()
            for i in range(sanity_steps):  # the sanity run: the same start for every way
                state, loss = step(state)
                trace.append(float(loss))
                if i == 0:
                    row["cold_s"] = time.perf_counter() - t  # trace + compile + first step
            losses[name] = trace
            box = [init(start)]

            def one_step():
                box[0], loss = step(box[0])
                return loss

            seconds = timer.run(one_step, sync)
            row.update(ms_per_step=seconds * 1e3, steps_per_s=1.0 / seconds)
            if name == "PyTorch eager":
                row["device"] = str(next(iter(state[0])).device)
        except Exception as e:  # recorded, the next way still runs
            row["error"] = error_text(e, 400)
        run.add(row)
    base = losses.get("dml gradient operators")
    sanity = dict(steps=sanity_steps, losses=losses)
    if base:
        sanity["max_relative_difference_to_dml"] = {
            name: max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(trace, base))
            for name, trace in losses.items()
        }
        sanity["first_step_relative_difference_to_dml"] = {
            name: abs(trace[0] - base[0]) / max(abs(base[0]), 1e-30)
            for name, trace in losses.items()
        }
    return sanity


def add_arguments(p: Any) -> None:
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--length", type=int, default=3072, help="samples per signal (even)")
    p.add_argument("--filters", type=int, default=16)
    p.add_argument("--classes", type=int, default=10)
    p.add_argument(
        "--learning-rate", type=float, default=1e-4, help="Adam's (the example's 0.05 with --quick)"
    )
    p.add_argument("--sanity-steps", type=int, default=10)


def run(run: Run) -> int:
    args = run.args
    # The steps donate their state; a CPU backend cannot reuse donated buffers and says so.
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    ex = examples_module("train_cnn")
    if run.quick:
        sizes = ex.SMALL
    else:
        sizes = ex.Sizes(args.batch, args.length, args.filters, args.classes)
    lr = ex.LEARNING_RATE if run.quick else args.learning_rate
    run.report.update(
        learning_rate=lr,
        sizes=dict(n=sizes.n, length=sizes.length, k=sizes.k, classes=sizes.classes),
    )
    sanity = _measure(run, ex, sizes, lr, 3 if run.quick else args.sanity_steps)
    run.report["sanity"] = sanity
    for name, trace in sanity["losses"].items():
        run.log(f"  {name:24s} losses " + " ".join(f"{v:.5f}" for v in trace))
    return 0


def table(report: dict) -> list[str]:
    s = report.get("sizes", {})
    diff = report.get("sanity", {}).get("max_relative_difference_to_dml", {})
    lines = [
        (
            f"Batch {s.get('n')} signals of {s.get('length')} samples, {s.get('k')} filters, "
            f"{s.get('classes')} classes, Adam; the largest relative difference of the first "
            "steps' losses to the DML graph's, from the same start."
        ),
        "",
        "| way | steps/s | ms/step | cold s | loss difference |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        if "steps_per_s" not in r:
            lines.append(f"| {r['way']} | {r.get('error', '-')} | | | |")
            continue
        d = diff.get(r["way"])
        lines.append(
            f"| {r['way']} | {r['steps_per_s']:.1f} | {r['ms_per_step']:.2f} | "
            f"{r.get('cold_s', 0):.1f} | {'' if d is None else f'{d:.1e}'} |"
        )
    return lines
