"""Checkpoints that resume a run exactly: weights, optimizer, scheduler, RNG, data order.

A checkpoint folder ``<output_dir>/checkpoint-<step>/`` holds:

- ``model/``: the policy (only the adapters for a LoRA run) via ``save_pretrained``;
- ``value_head.pt`` (PPO), ``optimizer.pt``, ``scheduler.pt``;
- ``rng.pt``: Python, NumPy and torch generator states;
- ``rollout.pt``: the generation batch being consumed and the position in it, so a run
  stopped in the middle of a generation cycle resumes on the same samples;
- ``trainer_state.json``: step counters, the prompt sampler's state and the config;
- ``history.jsonl``: the metrics logged up to this step.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import torch


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(folder: str | Path, *, model, tokenizer, optimizer, scheduler, trainer_state: dict,
                    rollout: dict | None, value_head=None, history: list[dict] | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder / "model", safe_serialization=True)
    tokenizer.save_pretrained(folder / "model")
    torch.save(optimizer.state_dict(), folder / "optimizer.pt")
    torch.save(scheduler.state_dict(), folder / "scheduler.pt")
    torch.save(rng_state(), folder / "rng.pt")
    torch.save(rollout, folder / "rollout.pt")
    if value_head is not None:
        torch.save(value_head.state_dict(), folder / "value_head.pt")
    (folder / "trainer_state.json").write_text(json.dumps(trainer_state, indent=2))
    (folder / "history.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history or []))
    return folder


def load_trainer_state(folder: str | Path) -> dict:
    path = Path(folder) / "trainer_state.json"
    if not path.exists():
        raise FileNotFoundError(f"{folder} is not a checkpoint (no trainer_state.json); pass a "
                                "<output_dir>/checkpoint-<step> folder to resume from.")
    return json.loads(path.read_text())


def restore_weights(folder: str | Path, model, value_head=None) -> None:
    """Load the checkpoint's weights into ``model`` (full model or LoRA adapters) in place."""
    from safetensors.torch import load_file

    from .models import is_peft_model

    model_dir = Path(folder) / "model"
    if is_peft_model(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, load_file(model_dir / "adapter_model.safetensors"))
    else:
        state = {}
        for shard in sorted(model_dir.glob("*.safetensors")):
            state.update(load_file(shard))
        missing, unexpected = model.load_state_dict(state, strict=False)
        # Tied embeddings are saved once; anything else missing means a different model.
        missing = [k for k in missing if "lm_head" not in k]
        if missing or unexpected:
            raise ValueError(f"checkpoint {folder} does not match the model: missing {missing[:3]}, "
                             f"unexpected {unexpected[:3]}")
    if value_head is not None:
        value_head.load_state_dict(torch.load(Path(folder) / "value_head.pt"))


def restore_training_state(folder: str | Path, optimizer, scheduler) -> dict | None:
    """Load optimizer, scheduler and RNG states; return the saved rollout buffer."""
    folder = Path(folder)
    optimizer.load_state_dict(torch.load(folder / "optimizer.pt"))
    scheduler.load_state_dict(torch.load(folder / "scheduler.pt"))
    set_rng_state(torch.load(folder / "rng.pt", weights_only=False))
    return torch.load(folder / "rollout.pt", weights_only=False)
