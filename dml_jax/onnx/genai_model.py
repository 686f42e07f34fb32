"""onnxruntime-genai's model folder (``Model``): a decoder step and its genai_config.json, whose
``model`` section names the step's file, its inputs and outputs, the end and pad ids, and whose
``search`` section gives the generation's defaults, so that a folder written for
onnxruntime-genai (by its model builder, or by hand) runs as it is:

    model = Model("phi-3-mini-int4")             # og.Model(folder)
    params = GeneratorParams(model)              # og.GeneratorParams(model): the defaults
    params.set_search_options(max_length=64)     # then what the caller sets
    g = Generator(model, params)

The ``session_options`` (onnxruntime's execution providers) have no meaning here: the session
runs on JAX's device (``device=`` and the session's other options pass through ``Model``).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..errors import ValidationError
from .elements import ONNX
from .generation_params import GeneratorParams, ModelDefaults

CONFIG = "genai_config.json"

# The genai_config.json inputs and outputs, by their keys there, and the roles they name
# (``roles.DecoderRoles``' attributes; a past or present name holds ``%d`` for the layer).
_NAMES = {
    ("inputs", "input_ids"): "input_ids",
    ("inputs", "attention_mask"): "attention_mask",
    ("inputs", "position_ids"): "position_ids",
    ("outputs", "logits"): "logits",
}
_LAYER_NAMES = {
    ("inputs", "past_key_names"): ("past", 0),
    ("inputs", "past_value_names"): ("past", 1),
    ("outputs", "present_key_names"): ("present", 0),
    ("outputs", "present_value_names"): ("present", 1),
}


class Model(ModelDefaults):
    """An onnxruntime-genai model folder (``og.Model``): ``session`` is the
    ``InferenceSession`` of its decoder step (``session_options`` given to it: ``device``,
    ``mesh``, ...), ``config`` its genai_config.json, ``defaults`` the ``GeneratorParams``
    values it gives (the ``search`` section, ``eos_token_id`` and ``pad_token_id``), which a
    ``GeneratorParams(model)`` starts from."""

    def __init__(self, folder: str | os.PathLike, **session_options: Any):
        from .session import InferenceSession

        folder = os.fspath(folder)
        path = os.path.join(folder, CONFIG)
        where = f"{ONNX}: {path}"
        try:
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
        except FileNotFoundError:
            raise ValidationError(
                f"{ONNX}: {folder}: no {CONFIG} (an onnxruntime-genai model folder holds one)"
            ) from None
        except (OSError, ValueError) as e:
            raise ValidationError(f"{where}: not readable as JSON: {e}") from None
        decoder = _section(config, ("model", "decoder"), where)
        filename = decoder.get("filename")
        if not isinstance(filename, str) or not filename:
            raise ValidationError(f"{where}: model.decoder.filename must name the step's file")
        self.folder, self.config = folder, config
        self.session = InferenceSession(os.path.join(folder, filename), **session_options)
        self.defaults = _defaults(config, where)
        _check_names(self.session, decoder, where)

    @property
    def type(self) -> str:
        """onnxruntime-genai's ``Model.type``: the config's ``model.type`` ("llama", "phi3",
        ...; "" where it names none)."""
        kind = self.config["model"].get("type", "")
        return kind if isinstance(kind, str) else str(kind)

    @property
    def device_type(self) -> str:
        """onnxruntime-genai's ``Model.device_type``: "CPU" or "CUDA", the device the step's
        session runs on (its first provider's)."""
        return self.session.get_providers()[0].removesuffix("ExecutionProvider")

    def __repr__(self) -> str:
        return f"Model({self.folder!r})"


def _section(config: Any, keys: tuple[str, ...], where: str) -> dict:
    node = config
    for i, key in enumerate(keys):
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ValidationError(f"{where}: {'.'.join(keys[: i + 1])} must be an object")
    return node


def _defaults(config: dict, where: str) -> dict:
    """The ``GeneratorParams`` values of the config: its ``search`` section checked by
    ``set_search_options``' rules (the file named in its error), the model's end and pad ids."""
    model = config["model"]
    search = config.get("search", {})
    if not isinstance(search, dict):
        raise ValidationError(f"{where}: search must be an object")
    probe = GeneratorParams()
    try:
        probe.set_search_options(**search)
    except ValidationError as e:
        raise ValidationError(f"{where}: search: {str(e).split(': ', 2)[-1]}") from None
    given = {"seed" if k == "random_seed" else k for k in search}
    out = {k: getattr(probe, k) for k in given if hasattr(probe, k) and k != "session"}
    for key in ("eos_token_id", "pad_token_id"):
        if key in model:
            value = model[key]
            ok = isinstance(value, int) or (
                key == "eos_token_id"
                and isinstance(value, list)
                and all(isinstance(v, int) for v in value)
            )
            if isinstance(value, bool) or not ok:
                raise ValidationError(f"{where}: model.{key} must be an int, got {value!r}")
            out[key] = value
    return out


def _check_names(session: Any, decoder: dict, where: str) -> None:
    """The config's input and output names are the roles the step's names show
    (``roles.find_roles``): the generator finds them by name, so a config naming others
    would run another wiring than onnxruntime-genai's."""
    from .roles import roles_of

    roles = roles_of(session)
    for (part, key), role in _NAMES.items():
        name = decoder.get(part, {}).get(key) if isinstance(decoder.get(part), dict) else None
        if name is not None and name != getattr(roles, role):
            raise ValidationError(
                f"{where}: model.decoder.{part}.{key} is '{name}', but the step's "
                f"{role.replace('_', ' ')} are '{getattr(roles, role)}'"
            )
    for (part, key), (role, k) in _LAYER_NAMES.items():
        pattern = decoder.get(part, {}).get(key) if isinstance(decoder.get(part), dict) else None
        if pattern is None:
            continue
        found = [pair[k] for pair in getattr(roles, role)]
        named = [_layer_name(pattern, layer, where, f"{part}.{key}") for layer in range(len(found))]
        if named != found:
            raise ValidationError(
                f"{where}: model.decoder.{part}.{key} '{pattern}' names {named[:2]}..., but "
                f"the step's are {found[:2]}..."
            )


def _layer_name(pattern: Any, layer: int, where: str, key: str) -> str:
    if not isinstance(pattern, str) or pattern.count("%d") != 1:
        raise ValidationError(f"{where}: model.decoder.{key} must hold one %d, got {pattern!r}")
    return pattern.replace("%d", str(layer))


__all__ = ["CONFIG", "Model"]
