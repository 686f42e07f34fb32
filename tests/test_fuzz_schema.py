"""Schema-driven fuzzing of every registered operator (``tests/schema_fuzz.py``): random and
mutated DxDispatch descriptors built from each operator's field declarations and example, with
``ValidationError`` naming the operator and a field path the only exception allowed, and valid
small descriptors executed in logical and buffer mode with their outputs' shapes and dtypes
checked. Below it, one test per defect the fuzzer found, each failing without its fix.

Size: the ``ci`` hypothesis profile runs ``CI_CASES`` cases (every operator at least twice);
``thorough`` (``DML_JAX_HYPOTHESIS_PROFILE=thorough``) runs 100,000; ``DML_JAX_FUZZ_SCHEMA_CASES``
sets the count and ``DML_JAX_FUZZ_SCHEMA_SEED`` the seed. ``DML_JAX_FUZZ_SCHEMA_REPORT=path``
writes the counts per operator and outcome as JSON. Long runs are easier from the script
(progress, a report kept up to date, hangs dumped): ``python tests/schema_fuzz.py --help``.
"""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest
import schema_fuzz
from hypothesis import settings

import dml_jax as dml
from dml_jax import registry

CI_CASES = 2 * len(schema_fuzz.SPECS)
THOROUGH_CASES = 100_000
# One case in EXECUTE_ONE_IN is executed when valid and small (as in the recorded long run).
EXECUTE_ONE_IN = 3


def _cases() -> int:
    given = os.environ.get("DML_JAX_FUZZ_SCHEMA_CASES")
    if given:
        return int(given)
    return THOROUGH_CASES if settings().max_examples >= 500 else CI_CASES


def test_every_operator_is_fuzzed():
    assert len(schema_fuzz.SPECS) == len(registry.registered_operators())
    names = {schema_fuzz.SPECS[i % len(schema_fuzz.SPECS)].name for i in range(CI_CASES)}
    assert names == set(registry.registered_operators())


def test_schema_fuzz():
    seed = int(os.environ.get("DML_JAX_FUZZ_SCHEMA_SEED", "0"))
    stats: Counter = Counter()
    failures: list = []
    schema_fuzz.fuzz(seed, range(_cases()), EXECUTE_ONE_IN, stats, failures)
    path = os.environ.get("DML_JAX_FUZZ_SCHEMA_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"stats": dict(sorted(stats.items())), "failures": failures}, f, indent=1)
    assert not failures, "\n\n".join(
        f"case {seed}:{i} ({op}, mutations {applied}): {message}\n{tb}"
        for i, op, applied, message, tb in failures[:5]
    )
    assert stats["executed"] > 0 and stats["rejected"] > 0 and stats["parse-rejected"] > 0


# Cases (seed, index) that found defects below and still reproduce them under this generator
# (the float and alignment defects were found by an earlier version's cases: their explicit
# tests stand for them).
FOUND = [(1, 2081), (3, 3509)]


@pytest.mark.parametrize("seed,index", FOUND, ids=[f"{s}:{i}" for s, i in FOUND])
def test_found_cases(seed, index):
    spec = schema_fuzz.SPECS[index % len(schema_fuzz.SPECS)]
    rng = schema_fuzz.case_rng(seed, index)
    obj, level, _ = schema_fuzz.generate(rng, spec)
    schema_fuzz.run_case(obj, level, execute_it=True, seed=index)


# --- the defects, each on its own ---------------------------------------------------------------


def _example(name: str) -> dict:
    return json.loads(json.dumps(registry.lookup(name).example.dispatchable))


def _message(obj: dict) -> str:
    with pytest.raises(dml.ValidationError) as info:
        dml.validate(dml.operator_desc_from_json(obj))
    return str(info.value)


def test_json_float_beyond_a_double_is_a_validation_error():
    """A FLOAT member holding an integer past a double's range (10**400) raised OverflowError
    from float() while reading the JSON."""
    for name, member in (
        ("DML_OPERATOR_ACTIVATION_ELU", "Alpha"),
        ("DML_OPERATOR_ACTIVATION_THRESHOLDED_RELU", "Alpha"),
        ("DML_OPERATOR_GEMM", "Beta"),
    ):
        obj = _example(name)
        obj["desc"][member] = 10**400
        assert _message(obj).startswith(f"{name}: desc.{member} must be a number within")
    add1 = _example("DML_OPERATOR_ELEMENT_WISE_ADD1")
    add1["desc"]["FusedActivation"] = {"Type": "ACTIVATION_ELU", "Desc": {"Alpha": -(10**400)}}
    assert _message(add1).startswith(
        "DML_OPERATOR_ELEMENT_WISE_ADD1: desc.FusedActivation.Desc.Alpha must be a number within"
    )


def test_inferred_output_of_another_type_drops_an_alignment_it_cannot_keep():
    """An INT8 input with GuaranteedBaseOffsetAlignment 1 (valid for 1-byte elements): the INT32
    output inferred from it copied the alignment, and the TensorDesc's own error (naming no
    operator) escaped validation of a valid description."""
    obj = _example("DML_OPERATOR_MATRIX_MULTIPLY_INTEGER")
    obj["desc"]["ATensor"]["GuaranteedBaseOffsetAlignment"] = 1
    desc = dml.operator_desc_from_json(obj)
    dml.validate(desc)
    t = dml.TensorDesc("INT8", [2, 2], guaranteed_base_offset_alignment=1)
    assert t.like(data_type="INT32").guaranteed_base_offset_alignment == 0
    assert t.like(data_type="UINT8").guaranteed_base_offset_alignment == 1
    wide = dml.TensorDesc("INT8", [2], guaranteed_base_offset_alignment=8)
    assert wide.like(data_type="INT32").guaranteed_base_offset_alignment == 8


def test_output_no_tensor_desc_can_hold_is_the_operators_error():
    """Padding of 2**31 implies a convolution output of 2**34 elements: the TensorDesc error
    raised while inferring it (by validation, or by an operator's own rules) named no operator
    and no field."""
    obj = _example("DML_OPERATOR_CONVOLUTION_INTEGER")
    obj["desc"]["EndPadding"] = [3, 2**31]
    message = _message(obj)
    assert message.startswith(
        "DML_OPERATOR_CONVOLUTION_INTEGER: OutputTensor cannot be the output: the inputs and "
        "attributes imply one that no tensor desc can hold (TensorDesc.Sizes describe"
    ), message
    # The same inferred inside an operator's own rules (ROI_POOLING's PooledSize).
    roi = _example("DML_OPERATOR_ROI_POOLING")
    roi["desc"]["PooledSize"] = {"Width": 2**32 - 1, "Height": 2}
    assert _message(roi).startswith("DML_OPERATOR_ROI_POOLING: OutputTensor cannot be the output")
    conv = _example("DML_OPERATOR_CONVOLUTION")
    conv["desc"]["EndPadding"] = [2**31, 2**31]
    assert _message(conv).startswith("DML_OPERATOR_CONVOLUTION: OutputTensor cannot be the output")
