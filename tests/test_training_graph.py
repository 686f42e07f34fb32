"""A training step as one GraphDesc (examples/train_cnn.py): DirectML's gradient operators plus
ADAM_OPTIMIZER against jax.grad of the forward graph plus the same ADAM_OPTIMIZER."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import dml_jax as dml

_PATH = Path(__file__).resolve().parent.parent / "examples" / "train_cnn.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("train_cnn", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("train_cnn", module)
    spec.loader.exec_module(module)
    return module


def test_gradient_graph_equals_jax_grad_of_the_forward_graph(example):
    """The backward pass of DirectML gradient operators is the derivative of the forward graph,
    also with many ReLU zeros (ties in MAX_POOLING's windows) after shifting the bias down."""
    x, labels = example.synthetic_data(seed=3)
    gradients = dml.compile_graph(example.gradient_graph())
    loss = dml.compile_graph(example.loss_graph())
    value_and_grad = jax.jit(jax.value_and_grad(lambda p: loss.fn(x, labels, *p).reshape(())))
    for shift in (0.0, -0.8):
        params = example.initial_parameters(seed=4)
        params[2] = params[2] + np.float32(shift)
        loss_value, *grads = gradients(x, labels, *params)
        want_loss, want = value_and_grad(params)
        np.testing.assert_allclose(np.asarray(loss_value).reshape(()), want_loss, rtol=1e-6)
        for name, g, w in zip(example.PARAMETERS, grads, want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def test_ten_training_steps_agree_and_the_loss_falls(example):
    x, labels = example.synthetic_data()
    start = example.initial_parameters()
    dml_losses, dml_params = example.train_with_dml_gradients(10, x, labels, start)
    jax_losses, jax_params = example.train_with_jax_grad(10, x, labels, start)
    assert dml_losses[-1] < 0.75 * dml_losses[0]
    assert jax_losses[-1] < 0.75 * jax_losses[0]
    np.testing.assert_allclose(dml_losses, jax_losses, rtol=1e-5)
    for name, a, b in zip(example.PARAMETERS, dml_params, jax_params):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)
        assert not np.array_equal(a, start[example.PARAMETERS.index(name)])  # it did train


def test_training_graph_validates_at_its_lowest_level(example):
    """BATCH_NORMALIZATION_TRAINING(_GRAD) need 4_1; everything else in the graph is older."""
    graph = example.training_graph()
    dml.validate_graph(graph, "4_1")
    with pytest.raises(dml.ValidationError, match="requires feature level 4_1"):
        dml.validate_graph(graph, "4_0")
