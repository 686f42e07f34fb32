"""dml_jax.fastpath: the registry of GPU fast paths, and what the package's layout promises.

Registering a name twice raises; ``lowering`` is the lax lowering without CUDA (or with
``fast_paths=False``); compile and graph take their lowering from it; no ops module imports
the kernels, no module imports one that imports it back, and the kernels hold no switches.
The kernels themselves, and their programs as seen with a CUDA backend, are in test_kernels.py.
"""

import ast
import dataclasses
import importlib
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath, registry
from dml_jax.kernels import movement as M

PACKAGE = pathlib.Path(dml.__file__).parent


def _int8(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).integers(-100, 100, shape).astype(np.int8))


def _same_bits(got, want):
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert np.asarray(g).tobytes() == np.asarray(w).tobytes()


def test_register_fast_path_twice_raises(monkeypatch):
    monkeypatch.setattr(fastpath, "_FAST_PATHS", {})

    def no(d):
        return False

    fastpath.register_fast_path("DML_OPERATOR_TILE", "test", no, None)
    fastpath.register_fast_path("DML_OPERATOR_SPLIT", "test", no, None)  # another operator
    with pytest.raises(ValueError, match="'test' of DML_OPERATOR_TILE is already registered"):
        fastpath.register_fast_path("DML_OPERATOR_TILE", "test", no, None)
    assert [p.name for p in fastpath.fast_paths("DML_OPERATOR_TILE")] == ["test"]


def test_kernels_register_the_covered_operators():
    names = {t: [p.name for p in fastpath.fast_paths(t)] for t in fastpath._FAST_PATHS}
    assert names["DML_OPERATOR_REDUCE"] == ["arg_kernel", "log_sum_exp_kernel", "max_min_kernel"]
    for op in ("ARGMIN", "ARGMAX", "TILE", "SPLIT", "JOIN", "DEPTH_TO_SPACE", "DEPTH_TO_SPACE1"):
        assert names[f"DML_OPERATOR_{op}"], op
    for op in ("SPACE_TO_DEPTH", "SPACE_TO_DEPTH1", "ELEMENT_WISE_CLIP", "ELEMENT_WISE_CLIP1"):
        assert names[f"DML_OPERATOR_{op}"], op
    assert "DML_OPERATOR_ELEMENT_WISE_CLIP_GRAD" not in names
    for op in ("MAX_POOLING", "MAX_POOLING1", "MAX_POOLING2", "AVERAGE_POOLING1"):
        assert names[f"DML_OPERATOR_{op}"] == ["kernel"], op


def test_lowering_is_the_lax_lowering_without_cuda(monkeypatch):
    calls = []
    td = dml.TensorDesc("INT8", (2, 8, 4, 8))
    desc = dml.TileOperatorDesc(td, td.like(sizes=(2, 8, 8, 16)), repeats=[1, 1, 2, 2])
    base = registry.lookup(desc.operator_type)

    def lower(d, x):
        calls.append(d)
        return base.lower(d, x)

    spec = dataclasses.replace(base, lower=lower)
    assert fastpath.select(desc).name == "words"
    x = _int8(td.sizes)
    monkeypatch.setattr(fastpath, "cuda_present", lambda: False)
    fn = fastpath.lowering(spec, desc)
    _same_bits(fn(x), base.lower(desc, x))
    assert calls == [desc]
    assert str(jax.make_jaxpr(fn)(x)) == str(jax.make_jaxpr(lambda y: spec.lower(desc, y))(x))
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    assert "platform_index" in str(jax.make_jaxpr(fastpath.lowering(spec, desc))(x))
    off = fastpath.lowering(spec, desc, fast_paths=False)
    assert "platform_index" not in str(jax.make_jaxpr(off)(x))


def test_target_platform_traces_one_branch(monkeypatch):
    """Inside ``target_platform`` a platform choice traces that platform's branch alone (the
    default where it names none); outside, both, as ``lax.platform_dependent``. The fast
    path's choice takes the same route: its lax lowering is not traced for CUDA."""
    traced = []

    def branch(name):
        def f(x):
            traced.append(name)
            return x + len(name)

        return f

    x = jnp.arange(3.0)
    both = str(jax.make_jaxpr(lambda y: fastpath.platform_choice(
        y, cpu=branch("cpu"), default=branch("default")))(x))  # fmt: skip
    assert "platform_index" in both and sorted(traced) == ["cpu", "default"]
    for target, want in (("cpu", "cpu"), ("cuda", "default")):
        traced.clear()
        with fastpath.target_platform(target):
            fn = jax.jit(lambda y: fastpath.platform_choice(
                y, cpu=branch("cpu"), default=branch("default")))  # fmt: skip
            text = str(jax.make_jaxpr(fn)(x))
            got = fn(x)
        assert "platform_index" not in text and traced == [want]
        np.testing.assert_array_equal(got, x + len(want))
    assert fastpath.target() is None  # the context is left as it was

    td = dml.TensorDesc("INT8", (2, 8, 4, 8))
    desc = dml.TileOperatorDesc(td, td.like(sizes=(2, 8, 8, 16)), repeats=[1, 1, 2, 2])
    base = registry.lookup(desc.operator_type)
    calls = []

    def lower(d, y):
        calls.append(d)
        return base.lower(d, y)

    spec = dataclasses.replace(base, lower=lower)
    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    fn = fastpath.lowering(spec, desc)
    xi = _int8(td.sizes)
    with fastpath.target_platform("cuda"):
        text = str(jax.make_jaxpr(fn)(xi))
    assert calls == [] and "platform_index" not in text  # the fast path alone
    with fastpath.target_platform("cpu"):  # (a new function: jit caches fn's trace for CUDA)
        _same_bits(jax.jit(lambda y: fn(y))(xi), base.lower(desc, xi))
    assert calls == [desc]
    # each target keeps its own trace: none of them is reused for another
    assert "platform_index" in str(jax.make_jaxpr(lambda y: fn(y))(xi))
    # derivatives still come from the lax lowering
    f32 = dml.TensorDesc("FLOAT32", (2, 8, 4, 8))
    clip = dml.ElementWiseClip1OperatorDesc(f32, f32, min=-1, max=2)
    cspec = registry.lookup(clip.operator_type)
    if fastpath.select(clip) is not None:
        grad_fn = jax.grad(lambda y: fastpath.lowering(cspec, clip)(y)[0].sum())
        with fastpath.target_platform("cuda"):
            text = str(jax.make_jaxpr(grad_fn)(jnp.linspace(-3, 3, 512).reshape(f32.sizes)))
        assert "platform_index" not in text


def test_platform_of_devices():
    assert fastpath.platform_of(jax.devices("cpu")[0]) == "cpu"
    assert fastpath.platform_of(object()) is None
    if fastpath.cuda_present():
        assert fastpath.platform_of(jax.devices("cuda")[0]) == "cuda"


def test_compile_operator_fast_paths_keyword(monkeypatch):
    from dml_jax.compile import _compile_cached
    from dml_jax.graph.tracing import _compile_graph_cached

    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    _compile_cached.cache_clear()  # nothing compiled with the real cuda_present inside
    _compile_graph_cached.cache_clear()
    try:
        td = dml.TensorDesc("INT8", (2, 8, 4, 8))
        desc = dml.ElementWiseClip1OperatorDesc(td, td, min=-1, max=2)
        x = _int8(td.sizes)
        fast = dml.compile_operator(desc)
        lax_only = dml.compile_operator(desc, fast_paths=False)
        assert fast is dml.compile_operator(desc, fast_paths=True) and fast is not lax_only
        assert "platform_index" in str(jax.make_jaxpr(fast.fn)(x))
        assert "platform_index" not in str(jax.make_jaxpr(lax_only.fn)(x))
        with pytest.raises(TypeError):
            dml.compile_operator(desc, None, None, None, False)  # keyword only
        # graph nodes take the same choice
        graph = dml.GraphDesc(
            input_count=1,
            output_count=1,
            nodes=[desc],
            input_edges=[dml.InputGraphEdge(0, 0, 0)],
            output_edges=[dml.OutputGraphEdge(0, 0, 0)],
        )
        g = dml.compile_graph(graph)
        assert "platform_index" in str(jax.make_jaxpr(g.fn)(x))
        # ... unless the graph is compiled without fast paths (a separate cache entry)
        g_lax = dml.compile_graph(graph, fast_paths=False)
        assert g_lax is not g and g_lax is dml.compile_graph(graph, fast_paths=False)
        assert "platform_index" not in str(jax.make_jaxpr(g_lax.fn)(x))
        _same_bits(g_lax(x), g(x))
        # a standalone (element-wise) fast path stands aside for nodes joined by an edge, so
        # that XLA fuses them; TILE's word form is lax code and stays
        tile = dml.TileOperatorDesc(td, td.like(sizes=(2, 8, 8, 16)), repeats=[1, 1, 2, 2])
        assert fastpath.select(desc).standalone and not fastpath.select(tile).standalone
        chain = dml.GraphDesc(
            input_count=1,
            output_count=1,
            nodes=[desc, tile],
            input_edges=[dml.InputGraphEdge(0, 0, 0)],
            output_edges=[dml.OutputGraphEdge(1, 0, 0)],
            intermediate_edges=[dml.IntermediateGraphEdge(0, 0, 1, 0)],
        )
        assert fastpath.select(desc, fusible=True) is None
        jaxpr = str(jax.make_jaxpr(dml.compile_graph(chain).fn)(x))
        assert jaxpr.count("platform_index") == 1  # TILE's choice only
    finally:
        _compile_cached.cache_clear()
        _compile_graph_cached.cache_clear()


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _statements(body):
    """Statements run at import time: module level, inside ``if``/``try``, not in functions."""
    for node in body:
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody", "handlers"):
                yield from _statements(getattr(node, field, []))


def _module_imports(path: pathlib.Path, import_time: bool = False) -> set[str]:
    """The dml_jax modules that ``path`` imports (``import_time``: only those imported while
    the module itself is imported, not lazily inside functions)."""
    name = _module_name(path)
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    out = set()
    for node in _statements(tree.body) if import_time else ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = pkg[: len(pkg) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:  # ``from . import x`` imports the module ``x``
                out.add(f"{mod}.{a.name}" if f"{mod}.{a.name}" in MODULES else mod)
    return out & set(MODULES)


def test_ops_import_nothing_from_kernels():
    for path in (PACKAGE / "ops").glob("*.py"):
        bad = {m for m in _module_imports(path) if m.startswith("dml_jax.kernels")}
        assert not bad, f"{path.name} imports {bad}"
    assert not {m for m in _module_imports(PACKAGE / "fastpath.py") if "kernels" in m}


def test_no_import_cycles():
    # Import time only: a function may import lazily what imports its module (buffers does).
    graph = {m: _module_imports(p, import_time=True) - {m} for m, p in MODULES.items()}
    for m, deps in graph.items():
        for d in deps:
            assert m not in graph[d], f"{m} and {d} import each other"
    state: dict = {}

    def visit(m, stack):
        state[m] = "open"
        for d in sorted(graph[m]):
            assert state.get(d) != "open", f"import cycle: {' -> '.join([*stack, m, d])}"
            if d not in state:
                visit(d, [*stack, m])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


# Module-level switches that once selected alternative kernel code at trace time; the kernels are
# frozen at their chosen variant and the alternatives live in benchmarks/kernel_variants.py (git
# history).
SWITCHES = (
    "ENABLED",
    "UNMASKED",
    "SINGLE_TILE_LSE",
    "PACKED_LANES",
    "PACKED_F16_KEY",
    "INT_ARGMIN",
    "F16_ARGMIN",
    "LSE_EXP",
    "ARG_KERNEL",
    "ARG_KERNEL_LONG",
    "JOIN_MODE",
    "D2S_MODE",
)


def test_no_module_level_switches():
    for name in MODULES:
        if name.endswith("__main__"):
            continue
        module = importlib.import_module(name)
        for switch in SWITCHES:
            assert not hasattr(module, switch), f"{name}.{switch}"
        if not name.startswith(("dml_jax.kernels", "dml_jax.fastpath")):
            continue
        for const, value in vars(module).items():
            # nor any other mode table: no constant of a kernel module names a variant
            if const.lstrip("_").isupper():
                values = value.values() if isinstance(value, dict) else [value]
                assert not any(isinstance(v, str) for v in values), f"{name}.{const}"
    assert not hasattr(M, "dispatch")  # the platform choice is fastpath.lowering's alone
