"""NaN weights are never saved, and settings that lead to them are refused when the config is built.

- Construction: ``adam_epsilon=0`` (Adam divides by ``sqrt(v) + eps``), magnitudes that overflow
  float32 arithmetic (``epsilon=1e308``, ``learning_rate=1e308``, ``weight_decay=1e308``,
  ``reward_weights=[1e308, ...]``), ``temperature=1e-300``, ``seed=2**64`` and NumPy infinities.
- The update: finite loss and gradient can still give non-finite weights (a learning rate of
  1e30 with weight decay 1e10 multiplies each weight by 1 - 1e40); the run stops with
  ``NonFiniteTrainingError`` and saves nothing.
- Loading: a checkpoint whose weights or optimizer moments hold NaN is refused.
- ``max_grad_norm=0`` means "no clipping" (it used to scale every gradient to 0).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from course_lib.algos import make_config
from course_lib.run.checkpoint import CheckpointError
from course_lib.run.nonfinite import NonFiniteTrainingError

from tiny_runs import tiny_trainer, tiny_weights


@pytest.mark.parametrize("field, value", [
    ("adam_epsilon", 0.0), ("epsilon", 1e308), ("learning_rate", 1e308), ("weight_decay", 1e308),
    ("temperature", 1e-300), ("temperature", 1e-5), ("seed", 2**64), ("seed", -1),
    ("learning_rate", np.float32("inf")), ("beta", np.float32("nan")), ("reward_weights", [1e308, 1e308]),
])
def test_settings_that_overflow_are_refused_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^{field}="):
        make_config("grpo", **{field: value})


def test_sensible_settings_still_pass():
    config = make_config("grpo", adam_epsilon=1e-8, temperature=0.7, seed=2**32 - 1, learning_rate=1e-6,
                         weight_decay=0.1, max_grad_norm=0.0, reward_weights=[1.0, 0.0, -0.5])
    assert config.max_grad_norm == 0.0


def test_an_update_that_makes_the_weights_nan_stops_the_run_and_saves_nothing(tmp_path):
    # lr * weight_decay = 1e40 overflows float32: the decay step multiplies weights by -inf.
    trainer = tiny_trainer(tmp_path / "run", learning_rate=1e30, weight_decay=1e10, max_steps=1, save_steps=1)
    with pytest.raises(NonFiniteTrainingError, match=r"step 1: the update made the weights non-finite"):
        trainer.train()
    assert not list((tmp_path / "run").glob("checkpoint-*")) and not (tmp_path / "run" / "final").exists()


def test_max_grad_norm_zero_disables_clipping(tmp_path):
    """Zero means no clipping: the weights move, exactly as under a limit no gradient reaches."""
    start = tiny_weights()
    moved = {}
    for limit in (0.0, 1e29):
        trainer = tiny_trainer(tmp_path / f"clip-{limit}", max_grad_norm=limit, max_steps=1, save_steps=0)
        rows = trainer.train()
        assert rows[0]["grad_norm"] > 0
        moved[limit] = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    changed = [k for k in start if not torch.equal(start[k], moved[0.0][k])]
    assert changed, "max_grad_norm=0 left every weight where it was"
    for name in start:
        torch.testing.assert_close(moved[0.0][name], moved[1e29][name], rtol=0, atol=0)


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("saved-run")
    tiny_trainer(folder, max_steps=1).train()
    return folder


def _copy(saved_run, tmp_path):
    import shutil

    shutil.copytree(saved_run, tmp_path / "run")
    return tmp_path / "run" / "checkpoint-1"


def test_nan_optimizer_state_in_a_checkpoint_is_refused(saved_run, tmp_path):
    folder = _copy(saved_run, tmp_path)
    state = torch.load(folder / "optimizer.pt", weights_only=True)
    first = next(iter(state["state"].values()))
    first["exp_avg_sq"].view(-1)[0] = math.nan
    torch.save(state, folder / "optimizer.pt")
    with pytest.raises(CheckpointError, match=r"optimizer state \(optimizer.pt\) hold NaN"):
        tiny_trainer(folder.parent, max_steps=2).train(resume_from=folder)


def test_nan_weights_in_a_checkpoint_are_refused(saved_run, tmp_path):
    folder = _copy(saved_run, tmp_path)
    weights = load_file(folder / "model" / "model.safetensors")
    name = next(iter(weights))
    weights[name].view(-1)[0] = math.inf
    save_file(weights, folder / "model" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"model weights hold NaN or infinity"):
        tiny_trainer(folder.parent, max_steps=2).train(resume_from=folder)
