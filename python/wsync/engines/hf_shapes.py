"""The names and shapes of the Hugging Face tensors a model's trainers publish, derived from the
engine's own model configuration when the caller does not give them (``hf_shapes``).

A rollout registers, before its first version, every tensor the trainers publish: its Hugging Face
name and full shape. An engine knows its model's configuration (vLLM's ``model_config.hf_config``,
SGLang's ``ModelConfig.hf_config``, verl's ``model.path``), so these come from it:

1. :func:`from_config`: the transformers model of that configuration built on the meta device (no
   memory, no weights read): its ``named_parameters()`` are exactly the names and shapes a trainer
   running the same transformers model registers (``Trainer.register_module(model)``; tied
   parameters once).
2. :func:`from_checkpoint`: where transformers has no class for the architecture (EAGLE / MTP
   heads, remote code), the checkpoint's safetensors headers in the model's directory.

:func:`resolve` applies them in that order unless the caller's ``hf_shapes`` (an override, e.g.
when the trainers run another transformers version that names tensors differently) is given.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch

Shapes = Dict[str, Tuple[int, ...]]


class ShapesUnknownError(ValueError):
    """Neither the caller nor the engine's model configuration tells the tensors' shapes."""


def from_config(hf_config: Any) -> Shapes:
    """{hf_name: shape} of the transformers model that `hf_config` (a PretrainedConfig) describes,
    built on the meta device: the class named by ``hf_config.architectures[0]`` when transformers
    has it, else ``AutoModelForCausalLM``. Raises ShapesUnknownError when transformers cannot
    build it (an architecture it does not know)."""
    import transformers

    archs: Sequence[str] = list(getattr(hf_config, "architectures", None) or [])
    classes = [getattr(transformers, a) for a in archs if hasattr(transformers, a)]
    errors = []
    with torch.device("meta"):
        for cls in classes:
            try:
                return _shapes_of(cls(hf_config))
            except Exception as e:  # a config the class does not take: next candidate
                errors.append(f"{cls.__name__}: {e}")
        try:
            return _shapes_of(transformers.AutoModelForCausalLM.from_config(hf_config))
        except Exception as e:
            errors.append(f"AutoModelForCausalLM: {e}")
    raise ShapesUnknownError(f"transformers cannot build the model of this configuration "
                             f"(architectures {archs}): {'; '.join(errors)}")


def _shapes_of(model: torch.nn.Module) -> Shapes:
    return {name: tuple(int(d) for d in p.shape) for name, p in model.named_parameters()}


def from_checkpoint(model_dir: "str | os.PathLike[str]") -> Shapes:
    """{name: shape} of every tensor in the safetensors files of `model_dir` (their headers only).
    Raises ShapesUnknownError when the directory holds none."""
    files = sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    if not files:
        raise ShapesUnknownError(f"no safetensors checkpoint in {model_dir}")
    shapes: Shapes = {}
    for path in files:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(int(d) for d in entry["shape"])
    return shapes


def resolve(given: Optional[Mapping[str, Sequence[int]]], hf_config: Any = None,
            model_dir: "Optional[str | os.PathLike[str]]" = None,
            what: str = "hf_shapes") -> Shapes:
    """`given` when it names any tensor (the caller's override); else the shapes of `hf_config`'s
    transformers model (:func:`from_config`); else those of the checkpoint in `model_dir`. Raises
    ShapesUnknownError naming `what` (the argument that would have told them) when none works."""
    if given:
        return {n: tuple(int(d) for d in s) for n, s in given.items()}
    reasons = []
    if hf_config is not None:
        try:
            return from_config(hf_config)
        except ShapesUnknownError as e:
            reasons.append(str(e))
    if model_dir is not None:
        try:
            return from_checkpoint(model_dir)
        except ShapesUnknownError as e:
            reasons.append(str(e))
    if hf_config is None and model_dir is None:
        reasons.append("no model configuration or directory either")
    raise ShapesUnknownError(f"wsync: {what} not given and not derivable from the engine's model "
                             f"({'; '.join(reasons)}); pass {what} ({{hf_name: shape}} of the "
                             "tensors the trainers publish)")


def from_model_path(model_path: "str | os.PathLike[str]", given: Optional[Mapping[str, Any]] = None,
                    what: str = "hf_shapes") -> Shapes:
    """:func:`resolve` for a model known by its path or hub id only (verl's ``model.path``):
    its configuration through transformers' AutoConfig, its checkpoint when it is a directory."""
    if given:
        return resolve(given, what=what)
    config = None
    try:
        import transformers

        config = transformers.AutoConfig.from_pretrained(str(model_path))
    except Exception:  # no config.json transformers reads: the checkpoint's headers may do
        config = None
    directory = model_path if Path(model_path).is_dir() else None
    return resolve(None, config, directory, what=what)
