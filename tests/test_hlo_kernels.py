"""``benchmarks/experiments/hlo_kernels.py`` reads the launches of a dumped XLA program: a
hand-written optimized-HLO text (a loop whose body calls a computation, tuple-typed parameters,
``/*index=N*/`` comments in headers) and a real dump of a jitted loop on this CPU."""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp

_PATH = pathlib.Path(__file__).parents[1] / "benchmarks" / "experiments" / "hlo_kernels.py"
_spec = importlib.util.spec_from_file_location("hlo_kernels", _PATH)
H = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(H)

TEXT = """HloModule jit_steps, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_add (p0: f32[4], p1: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %p1 = f32[4]{0} parameter(1)
  ROOT %add.1 = f32[4]{0} add(%p0, %p1)
}

%fused_exp (p0.1: f32[4]) -> f32[4] {
  %p0.1 = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(%p0.1)
  ROOT %m = f32[4]{0} multiply(%e, %e)
}

%inner (x.1: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0)
  ROOT %f2 = f32[4]{0} fusion(%x.1), kind=kLoop, calls=%fused_exp
}

%body (arg: (s32[], f32[4], /*index=2*/f32[4])) -> (s32[], f32[4], f32[4]) {
  %arg = (s32[], f32[4]{0}, /*index=2*/f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%arg), index=1
  %f1 = f32[4]{0} fusion(%x, %x), kind=kLoop, calls=%fused_add
  %c = f32[4]{0} call(%f1), to_apply=%inner
  %k = f32[4]{0} custom-call(%c), custom_call_target="__gpu$xla.gpu.triton"
  %i = s32[] get-tuple-element(%arg), index=0
  ROOT %t = (s32[], f32[4]{0}, f32[4]{0}) tuple(%i, %k, %k)
}

%cond (arg.1: (s32[], f32[4], f32[4])) -> pred[] {
  %arg.1 = (s32[], f32[4]{0}, f32[4]{0}) parameter(0)
  ROOT %p = pred[] constant(true)
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %t0 = (s32[], f32[4]{0}, f32[4]{0}) tuple(%z, %a, %a)
  %w = (s32[], f32[4]{0}, f32[4]{0}) while(%t0), condition=%cond, body=%body
  %cp = f32[4]{0} copy(%a)
  ROOT %r = f32[4]{0} get-tuple-element(%w), index=1
}
"""


def test_the_loop_body_and_what_it_calls():
    comps = H.computations(TEXT)
    assert {"body", "inner", "fused_add", "main", "ENTRY"} <= set(comps)
    assert H.loop_body(comps) == "body"
    launches = H.kernels(comps, "body")
    # in order, the called computation's fusion in the call's place
    assert [k["name"] for k in launches] == ["f1", "f2", "k"]
    assert [H.signature(k) for k in launches] == [
        "fusion[kLoop] add",
        "fusion[kLoop] exponential,multiply",
        "custom-call[__gpu$xla.gpu.triton]",
    ]
    entry = H.kernels(comps, "ENTRY")
    assert [k["name"] for k in entry] == ["f1", "f2", "k", "cp"]  # the loop's, then the copy


def test_a_real_dump(tmp_path):
    """A jitted fori_loop compiled here: its optimized HLO parses and its loop body is found."""

    def f(x):
        return jax.lax.fori_loop(0, 8, lambda i, y: jnp.sin(y) * 2 + i, x)

    text = jax.jit(f).lower(jnp.ones(64)).compile().as_text()
    comps = H.computations(text)
    body = H.loop_body(comps)
    assert body is not None and "ENTRY" in comps
    assert H.kernels(comps, body)  # at least one launch in the body
