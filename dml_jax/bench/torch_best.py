"""PyTorch at its best, by its own documentation: the configurations a suite times a model in.

- ``eager``: ``torch.inference_mode``, ``cudnn.benchmark`` on, models on NCHW images in
  channels-last memory format (PyTorch's guidance for convolutions under float16), the fused
  attention fast paths on (the TorchScript exporter turns ``torch.backends.mha``'s off for its
  export; ``tuned`` turns it back on);
- ``eager fused``: the same with BatchNorm folded into the convolutions before it by PyTorch's
  own ``torch.fx.experimental.optimization.fuse`` (models with BatchNorm whose FX trace works);
- ``compile <mode>``: ``torch.compile`` in each of ``--compile-modes`` (``default``,
  ``max-autotune``, ``reduce-overhead``: CUDA graphs) with Inductor's ``freezing`` (the weights
  folded into the compiled graph, as the inference guide advises) and static shapes, each
  compiled with its on-disk caches in a fresh directory (a cold first call, as dml_jax's is);
- ``cuda graph``: at batch 1, the eager model captured once in a CUDA graph and replayed.

Precision: TF32 off for float32 work (dml_jax computes float32 products in float32).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from .harness import cold_torch_caches, error_text

COMPILE_MODES = ("default", "max-autotune", "reduce-overhead")


@contextlib.contextmanager
def tuned(torch: Any) -> Iterator[None]:
    """PyTorch's inference settings for the block: inference mode, cuDNN's autotuner, the MHA
    fast path, TF32 off; each restored after."""
    saved = (
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.mha.get_fastpath_enabled(),
    )
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.mha.set_fastpath_enabled(True)
    try:
        with torch.inference_mode():
            yield
    finally:
        (
            torch.backends.cudnn.benchmark,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cuda.matmul.allow_tf32,
        ) = saved[:3]
        torch.backends.mha.set_fastpath_enabled(saved[3])


def placed(torch: Any, model: Any, args: tuple, image: bool) -> tuple[Any, tuple]:
    """``model`` and ``args`` in the memory format PyTorch runs them fastest in: channels-last
    for a model on NCHW images (the 4-D floating inputs too), as they are otherwise."""
    if not image:
        return model, args
    model = model.to(memory_format=torch.channels_last)
    args = tuple(
        a.contiguous(memory_format=torch.channels_last)
        if a.dim() == 4 and a.is_floating_point()
        else a
        for a in args
    )
    return model, args


def has_batch_norm(torch: Any, model: Any) -> bool:
    return any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())


class Configurations:
    """The PyTorch configurations of one model: ``calls`` (name -> zero-argument call) for a
    ``Timer``, ``first_s`` (name -> seconds of the first call, compile included) and
    ``errors`` (name -> why it did not run)."""

    def __init__(self, torch: Any):
        self.torch = torch
        self.calls: dict[str, Callable[[], Any]] = {}
        self.first_s: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self._compiled: list[Any] = []

    def sync(self, _out: Any = None) -> None:
        self.torch.cuda.synchronize()

    def _add(self, name: str, call: Callable[[], Any]) -> None:
        try:
            t = time.perf_counter()
            call()
            self.sync()
            self.first_s[name] = round(time.perf_counter() - t, 2)
            self.calls[name] = call
        except Exception as e:  # a configuration PyTorch cannot run here: recorded
            self.errors[name] = error_text(e)

    def eager(self, model: Any, args: tuple) -> None:
        self._add("eager", lambda: model(*args))

    def eager_fused(self, model: Any, args: tuple) -> None:
        """BatchNorm folded by ``torch.fx.experimental.optimization.fuse`` (models with
        BatchNorm only)."""
        if not has_batch_norm(self.torch, model):
            return
        try:
            from torch.fx.experimental.optimization import fuse

            fused = fuse(model)
        except Exception as e:  # FX cannot trace the model (data-dependent control flow)
            self.errors["eager fused"] = error_text(e)
            return
        self._add("eager fused", lambda: fused(*args))

    def compiled(self, model: Any, args: tuple, modes: tuple[str, ...]) -> None:
        """``torch.compile`` in each of ``modes``, with freezing and static shapes."""
        import torch._inductor.config as inductor

        for mode in modes:
            name = f"compile {mode}"
            saved = inductor.freezing
            inductor.freezing = True
            try:
                with cold_torch_caches():
                    fn = self.torch.compile(model, mode=mode, dynamic=False)
                    self._add(name, lambda fn=fn: fn(*args))
                self._compiled.append(fn)
            except Exception as e:
                self.errors[name] = error_text(e)
            finally:
                inductor.freezing = saved

    def cuda_graph(self, model: Any, args: tuple) -> None:
        """The eager model captured in a CUDA graph (warmed on a side stream first, as
        PyTorch's documentation shows) and replayed on the same input buffers."""
        torch = self.torch
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    model(*args)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = model(*args)
        except Exception as e:
            self.errors["cuda graph"] = error_text(e)
            return

        def replay():
            graph.replay()
            return out

        self._add("cuda graph", replay)

    def close(self) -> None:
        """Drops the compiled functions and dynamo's caches."""
        self._compiled.clear()
        self.calls.clear()
        self.torch._dynamo.reset()


__all__ = ["COMPILE_MODES", "Configurations", "has_batch_norm", "placed", "tuned"]
