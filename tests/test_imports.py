"""The package's import structure, read from the source (ast), nothing imported.

Every ``import`` counts, deferred ones inside functions included: a cycle that only works
because one side imports late is still a cycle. Across modules, only public names are imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "dml_jax"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    return {_module_name(p): (p, p.name == "__init__.py") for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every dml_jax import in ``name``."""
    path, is_package = MODULES[name]
    base = name if is_package else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name in MODULES]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base.split(".")[: len(base.split(".")) - (node.level - 1)]
                source = ".".join(anchor + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if source not in MODULES:
                continue
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in MODULES:  # ``from . import sharding``: the submodule itself
                    found.append((submodule, None, node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return found


def _graph() -> dict[str, set[str]]:
    return {name: {target for target, _, _ in _imports(name) if target != name} for name in MODULES}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def test_the_scan_sees_the_package():
    assert {"dml_jax", "dml_jax.compile", "dml_jax.graph", "dml_jax.dxdispatch.run"} <= set(MODULES)
    assert "dml_jax.buffers" in _graph()["dml_jax.compile"]
    assert "dml_jax.jsonforms" in _graph()["dml_jax.graph_json"]


def test_no_import_cycles_between_package_modules():
    # The package's __init__ re-exports its modules; a module importing the package itself
    # (``from . import SomeName``) would close a cycle through it and is caught too.
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_private_names_imported_across_modules():
    offenders = [
        f"{name}:{line}: from {source} import {imported}"
        for name in MODULES
        for source, imported, line in _imports(name)
        if imported is not None and imported.startswith("_") and source != name
    ]
    assert not offenders, "private names imported across modules:\n" + "\n".join(offenders)


def _imports_jax_private(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            lines += [node.lineno for a in node.names if a.name.startswith("jax._src")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jax._src"):
            lines.append(node.lineno)
    return lines


def test_jax_private_imports_are_in_one_module():
    # jax._src changes without notice: kernels/jax_private.py is the one module that reaches
    # it, and says which jax releases it was tested on.
    offenders = [
        f"{name}:{line}"
        for name, (path, _) in MODULES.items()
        if name != "dml_jax.kernels.jax_private"
        for line in _imports_jax_private(path)
    ]
    assert not offenders, "jax._src imported outside kernels/jax_private.py: " + ", ".join(
        offenders
    )
    assert _imports_jax_private(MODULES["dml_jax.kernels.jax_private"][0])


def test_jax_private_names_resolve_under_this_jax():
    import jax

    from dml_jax.kernels import jax_private

    version = tuple(int(p) for p in jax.__version__.split(".")[:2])
    assert version in jax_private.TESTED_JAX_VERSIONS, (
        f"jax {jax.__version__} is not among the releases kernels/jax_private.py was tested on"
    )
    assert hasattr(jax_private.mlir_ir(), "Type")
    assert all(jax_private.mlir_dialects("arith", "gpu", "llvm", "memref", "nvvm", "vector"))
    assert hasattr(jax_private.triton_lowering(), "triton_lowering_rules")
