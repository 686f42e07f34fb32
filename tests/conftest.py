"""Shared test set-up: deterministic hypothesis profiles, a random generator per test, CUDA's
choice of a fast path forced on any machine (``forced_cuda_kernel``), and a spy on whether a
function found something (``found_by``).

Profiles: ``ci`` (default, modest example counts) and ``thorough`` (select with
``DML_JAX_HYPOTHESIS_PROFILE=thorough python -m pytest``). Tests that need 64-bit types wrap
their bodies in ``with jax.enable_x64(True):`` themselves.
"""

import contextlib
import os
import zlib

# Parallel workers (pytest-xdist) share one GPU on a CUDA machine: none may take most of its
# memory up front, as JAX does by default.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Most of the suite's time is XLA compiling thousands of small CPU programs; LLVM's optimization
# buys these tiny programs nothing. CPU-only machines (CI) skip its expensive passes, compile at
# LLVM's -O0 and emit fusions with XLA's direct LLVM emitters rather than its MLIR fusion
# emitters (the same IEEE operations, no fast-math either way; each halves what is left of the
# compile time: together about two fifths of the suite's time on two cores); a CUDA machine
# keeps XLA's defaults, so GPU code is compiled as users get it. The direct emitters convert
# some values to FNUZ float8 wrongly (tests/test_onnx_backend.py runs those cases in a process
# of its own with DML_JAX_XLA_FUSION_EMITTERS=1, which keeps XLA's emitters).
LEGACY_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
if not os.path.exists("/dev/nvidiactl"):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + " --xla_llvm_disable_expensive_passes=true --xla_backend_optimization_level=0"
        + ("" if os.environ.get("DML_JAX_XLA_FUSION_EMITTERS") == "1" else f" {LEGACY_EMITTERS}")
    ).strip()

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=12, **_COMMON)
settings.register_profile("thorough", max_examples=500, **_COMMON)
settings.load_profile(os.environ.get("DML_JAX_HYPOTHESIS_PROFILE", "ci"))


def _readable_ir_version() -> int | None:
    """The newest ONNX IR version the installed onnxruntime reads, where a model written at the
    onnx package's own (which ``helper.make_model`` puts in every model the tests build) is
    refused: onnx 1.23 writes 14, onnxruntime 1.30 reads 13 at most. None where nothing is
    refused (or either package is absent)."""
    import re

    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    info = [[helper.make_tensor_value_info(n, TensorProto.FLOAT, [1])] for n in "xy"]
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "probe", *info)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 (onnxruntime's Fail derives from Exception alone)
        # the refusal names the newest version it reads
        m = re.search(r"max supported IR version: (\d+)", str(e))
        return int(m.group(1)) if m else None
    return None


_IR_VERSION = _readable_ir_version()
if _IR_VERSION is not None:  # the tests' models written at a version onnxruntime reads
    import onnx.helper

    _make_model = onnx.helper.make_model

    def _make_readable_model(graph, **kwargs):
        kwargs.setdefault("ir_version", _IR_VERSION)
        return _make_model(graph, **kwargs)

    onnx.helper.make_model = _make_readable_model


def _lower_kernels_for_cuda() -> None:
    """With ``DML_JAX_LOWER_KERNELS_FOR_CUDA=1``: each call a test makes to a kernel entry point
    of ``dml_jax.kernels`` (a function with an ``interpret`` parameter) in Pallas's interpreter
    is also lowered for CUDA with ``interpret=False``, as Triton or Mosaic GPU compiles it, and
    a refusal there fails the test. The interpreter runs kernel bodies that Pallas's GPU
    lowering may refuse; a machine without a GPU sees that only so. Off by default: it lengthens
    the kernel tests."""
    import functools
    import importlib
    import inspect
    import pkgutil

    import jax
    import numpy as np

    from dml_jax import kernels

    def checked(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def call(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            if bound.arguments.get("interpret"):
                bound.arguments["interpret"] = False
                leaves, tree = jax.tree.flatten((bound.args, bound.kwargs))
                # arrays become the program's arguments; scalars (a clip's bounds) stay values
                at = [i for i, v in enumerate(leaves)
                      if isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v)]  # fmt: skip

                def compiled(*arrays):
                    given = list(leaves)
                    for i, a in zip(at, arrays):
                        given[i] = a
                    a, kw = jax.tree.unflatten(tree, given)
                    return fn(*a, **kw)

                shapes = [jax.ShapeDtypeStruct(np.shape(leaves[i]), leaves[i].dtype) for i in at]
                jax.jit(compiled).trace(*shapes).lower(lowering_platforms=("cuda",))
            return fn(*args, **kwargs)

        return call

    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"dml_jax.kernels.{info.name}")
        for name, fn in list(vars(module).items()):
            # entry points: public functions of the module itself (helpers traced inside a
            # kernel's body take ``interpret`` too, and are no program of their own)
            own = inspect.isfunction(fn) and fn.__module__ == module.__name__
            if own and not name.startswith("_") and "interpret" in inspect.signature(fn).parameters:
                setattr(module, name, checked(fn))


if os.environ.get("DML_JAX_LOWER_KERNELS_FOR_CUDA") == "1":
    _lower_kernels_for_cuda()


@contextlib.contextmanager
def forced_cuda_kernel(monkeypatch, module, name: str, record, interpret: bool = True):
    """CUDA's choice of fast paths on this machine, ``module.name`` (a kernel's entry point)
    recorded at each call (``record(*args)``) and run in Pallas's interpreter where
    ``interpret``; yields the list of records. Compiled graphs are dropped before and after."""
    from dml_jax import fastpath
    from dml_jax.graph import tracing

    calls = []
    original = getattr(module, name)
    extra = {"interpret": True} if interpret else {}

    def recorded(*args, **kw):
        calls.append(record(*args))
        return original(*args, **{**kw, **extra})  # (interpret overrides the caller's)

    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    monkeypatch.setattr(module, name, recorded)
    tracing._compile_graph_cached.cache_clear()
    try:
        yield calls
    finally:
        tracing._compile_graph_cached.cache_clear()


@pytest.fixture
def found_by(monkeypatch):
    """``found_by(module, name)``: that function wrapped so that each call records whether it
    gave something (not None); returns the list of records."""

    def spy(module, name: str) -> list[bool]:
        found, original = [], getattr(module, name)

        def call(*args, **kwargs):
            out = original(*args, **kwargs)
            found.append(out is not None)
            return out

        monkeypatch.setattr(module, name, call)
        return found

    return spy


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator of the test's own, seeded from its node id (crc32, not the salted ``hash``):
    its data is the same whichever tests ran before it, in whatever order, on whichever worker."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


def _cuda_machine() -> bool:
    return os.path.exists("/dev/nvidiactl")


CPU_CASES = 3  # kernel_matrix cases a test keeps without CUDA


def pytest_collection_modifyitems(config, items):
    """A GPU kernel's correctness matrix (tests marked ``kernel_matrix``) runs whole on a CUDA
    machine, where the kernels compile natively, and in Pallas interpret mode everywhere else,
    where each case costs seconds of CPU: there only ``kernel_matrix_subset`` runs.
    ``DML_JAX_KERNEL_MATRIX=full`` runs them all; the rest are reported as deselected."""
    if _cuda_machine() or os.environ.get("DML_JAX_KERNEL_MATRIX") == "full":
        return
    keep, drop = kernel_matrix_subset(items)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def kernel_matrix_subset(items) -> tuple[list, list]:
    """(kept, dropped) items: a ``kernel_matrix`` case is kept when it brings a parameter value
    no kept case of its test has had yet, up to ``CPU_CASES`` cases a test; a test whose cases
    are whole scenarios names the ones kept instead (``@pytest.mark.kernel_matrix(cpu=[case
    ids])``), and naming a case it does not have is a usage error. Other items are kept."""
    tests: dict = {}  # (file, test) -> [parameter values kept, cases kept, ids seen]
    keep, drop = [], []
    for item in items:
        spec = getattr(item, "callspec", None)
        mark = item.get_closest_marker("kernel_matrix")
        if spec is None or mark is None:
            keep.append(item)
            continue
        seen, kept, ids = tests.setdefault((str(item.path), item.originalname), [set(), 0, set()])
        ids.add(spec.id)
        chosen = mark.kwargs.get("cpu")
        values = {(k, repr(v)) for k, v in spec.params.items()}
        if chosen is not None:
            take = spec.id in chosen
        else:
            take = bool(values - seen) and kept < CPU_CASES
        if take:
            seen |= values
            tests[(str(item.path), item.originalname)][1] = kept + 1
        (keep if take else drop).append(item)
    for item in keep + drop:
        mark = item.get_closest_marker("kernel_matrix")
        if mark is None or getattr(item, "callspec", None) is None:
            continue
        missing = set(mark.kwargs.get("cpu") or ()) - tests[(str(item.path), item.originalname)][2]
        if missing:
            raise pytest.UsageError(
                f"{item.path}::{item.originalname}: kernel_matrix(cpu=...) names cases it does "
                f"not have: {sorted(missing)}"
            )
    return keep, drop
