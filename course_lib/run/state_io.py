"""Checkpoint state in formats that cannot run code: safetensors for tensors, JSON for the rest.

A pickle (``torch.load(weights_only=False)``) runs whatever its author put in it, so a
checkpoint received from someone else, or edited on a shared disk, could execute code on
``--resume-from``. Nothing here unpickles:

- **RNG states** (``rng.json`` + ``rng.safetensors``): Python's Mersenne Twister state
  (625 integers) and NumPy's (624 integers, position, cached Gaussian) as JSON, torch's
  CPU and CUDA generator states (byte tensors) as safetensors;
- **the in-flight generation batch** (``rollout.json`` + ``rollout.safetensors``): the
  tensors of :class:`course_lib.run.batches.GenerationBatch` as safetensors, its row indices,
  token count and metrics, and the last sample table, as JSON (floats round-trip exactly:
  ``json`` writes the shortest repr, NaN included);
- **optimizer and scheduler** (``optimizer.pt``, ``scheduler.pt``, ``value_head.pt``):
  plain tensors, numbers and lists, read with ``torch.load(weights_only=True)``, torch's
  restricted unpickler that refuses any object outside an allow-list of tensor types.

Every reader turns a malformed or hostile file into a :class:`StateFileError` naming the
file, so the caller (``course_lib.run.checkpoint``) can say which checkpoint is damaged.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

__all__ = ["StateFileError", "load_rng", "load_rollout", "load_tensor_state", "read_tensors", "save_rng",
           "save_rollout"]


class StateFileError(ValueError):
    """A state file that is missing, malformed, or holds something other than data."""


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise StateFileError(f"{path.name} does not parse as JSON ({error})") from None


def read_tensors(path: Path) -> dict[str, torch.Tensor]:
    try:
        return load_file(path)
    except (OSError, SafetensorError, ValueError) as error:
        raise StateFileError(f"{path.name} is not a readable safetensors file ({error})") from None


# --------------------------------------------------------------------------- RNG
def save_rng(folder: Path, state: dict) -> None:
    """``state``: ``{"python": random.getstate(), "numpy": np.random.get_state(), "torch": ByteTensor,
    "cuda": list[ByteTensor] | None}`` (what ``course_lib.run.checkpoint.rng_state`` returns)."""
    version, internal, gauss = state["python"]
    kind, keys, position, has_gauss, cached = state["numpy"]
    (folder / "rng.json").write_text(json.dumps({
        "python": {"version": version, "state": list(internal), "gauss_next": gauss},
        "numpy": {"kind": kind, "keys": [int(k) for k in keys], "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "cuda_devices": len(state["cuda"]) if state.get("cuda") is not None else None}))
    tensors = {"torch": state["torch"].contiguous()}
    for index, cuda_state in enumerate(state.get("cuda") or []):
        tensors[f"cuda.{index}"] = cuda_state.contiguous()
    save_file(tensors, folder / "rng.safetensors")


def load_rng(folder: Path) -> dict:
    """Inverse of :func:`save_rng`, validated: a wrong shape or type raises ``StateFileError``."""
    data, tensors = _read_json(folder / "rng.json"), read_tensors(folder / "rng.safetensors")
    try:
        py, npy = data["python"], data["numpy"]
        python_state = (int(py["version"]), tuple(int(v) for v in py["state"]), py["gauss_next"])
        random.Random().setstate(python_state)  # validates length and types without touching the global one
        numpy_state = (str(npy["kind"]), np.asarray(npy["keys"], dtype=np.uint32), int(npy["position"]),
                       int(npy["has_gauss"]), float(npy["cached_gaussian"]))
        np.random.RandomState().set_state(numpy_state)
        cuda = None if data["cuda_devices"] is None else [tensors[f"cuda.{i}"] for i in range(data["cuda_devices"])]
        torch_state = tensors["torch"]
        if torch_state.dtype != torch.uint8:
            raise ValueError(f"the torch state has dtype {torch_state.dtype}, not uint8")
    except (KeyError, TypeError, ValueError) as error:
        raise StateFileError(f"rng.json / rng.safetensors do not hold RNG states ({error!r})") from None
    return {"python": python_state, "numpy": numpy_state, "torch": torch_state, "cuda": cuda}


# --------------------------------------------------------------------------- rollout
def _encode_rollout(rollout: dict, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    """JSON-safe description of one process's rollout; its tensors go into ``tensors`` under ``prefix``."""
    batch, plain, names = rollout["batch"], {}, []
    for spec in dataclasses.fields(batch):
        value = getattr(batch, spec.name)
        if isinstance(value, torch.Tensor):
            tensors[prefix + spec.name] = value.detach().cpu().contiguous().clone()  # no shared storage
            names.append(spec.name)
        else:
            plain[spec.name] = value
    return {"batch": plain, "tensors": names, "samples": [list(part) for part in rollout["samples"]]}


def save_rollout(folder: Path, rollout: dict | None) -> None:
    """``rollout``: None, or ``{"batch": GenerationBatch, "samples": (prompts, completions, rewards,
    advantages)}``: the batch being consumed and the sample table printed from it; a run of
    several processes adds ``"other_ranks"``, the same dict for each other process."""
    tensors: dict[str, torch.Tensor] = {}
    meta: dict[str, Any] = {"batch": None}
    if rollout is not None:
        meta = _encode_rollout(rollout, "", tensors)
        if "other_ranks" in rollout:
            meta["other_ranks"] = [_encode_rollout(other, f"rank{rank}.", tensors)
                                   for rank, other in enumerate(rollout["other_ranks"], start=1)]
    (folder / "rollout.json").write_text(json.dumps(meta))
    save_file(tensors, folder / "rollout.safetensors")


def _decode_rollout(meta: dict, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    from .batches import GenerationBatch

    names = {spec.name for spec in dataclasses.fields(GenerationBatch)}
    values = {**meta["batch"], **{name: tensors[prefix + name] for name in meta["tensors"]}}
    unknown = set(values) - names
    if unknown:
        raise ValueError(f"unknown fields {sorted(unknown)}")
    samples = tuple(list(part) for part in meta["samples"])
    if len(samples) != 4:
        raise ValueError("the sample table needs 4 columns")
    return {"batch": GenerationBatch(**values), "samples": samples}


def load_rollout(folder: Path) -> dict | None:
    """Inverse of :func:`save_rollout`: None, or the batch and the sample table (and ``other_ranks``)."""
    meta = _read_json(folder / "rollout.json")
    if not isinstance(meta, dict) or "batch" not in meta:
        raise StateFileError("rollout.json lacks its 'batch' entry")
    if meta["batch"] is None:
        return None
    tensors = read_tensors(folder / "rollout.safetensors")
    try:
        rollout = _decode_rollout(meta, "", tensors)
        if "other_ranks" in meta:
            rollout["other_ranks"] = [_decode_rollout(other, f"rank{rank}.", tensors)
                                      for rank, other in enumerate(meta["other_ranks"], start=1)]
    except (KeyError, TypeError, ValueError) as error:
        raise StateFileError(f"rollout.json / rollout.safetensors do not hold a generation batch ({error!r})") from None
    return rollout


# --------------------------------------------------------------------------- optimizer & co
def load_tensor_state(path: Path) -> Any:
    """A state dict saved with ``torch.save`` (optimizer, scheduler, value head), read with
    ``weights_only=True``: tensors, numbers, strings and containers only, never code."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, OSError, RuntimeError, EOFError, ValueError, AttributeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise StateFileError(f"{path.name} holds something other than tensors and numbers, or is damaged "
                             f"({first})") from None
