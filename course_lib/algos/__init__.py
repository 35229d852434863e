"""The algorithms of the course (GRPO in three files, RLOO and PPO in one each, with what
the two share in ``onpolicy.py``; SFT, rejection sampling, DPO and on-policy distillation
beside them) and the registry that names them.

==========  ====================================================================
file        what a lesson finds there
==========  ====================================================================
base.py     the :class:`~course_lib.algos.base.Algorithm` protocol the trainer calls
            (advantages, then loss), ``LossOutput``, ``ScoredBatch``
grpo.py     ``group_advantages``, ``clipped_surrogate``, ``LOSSES`` (one entry per
            loss type), ``policy_loss`` (GRPO, DAPO, Dr. GRPO, GSPO,
            two-sided clipping, KL, TIS/MIS, entropy control), ``GRPO``
grpo_config ``GRPOConfig``: the GRPO-only fields
grpo_losses the loss types' other surrogates, averagings and metrics (CISPO, SAPO, VESPO)
onpolicy.py what RLOO and PPO share: their config fields, KL folded into the reward
rloo.py     ``RLOOConfig``, ``rloo_advantages``, Reinforce++, ``rloo_policy_loss``
ppo.py      ``PPOConfig``, ``ValueHead``, ``gae``, ``ppo_policy_loss``, ``value_loss``
sft.py      ``SFTConfig``, ``tokenize_prompt_and_output``, ``pack_examples``, ``sft_loss``
rejection   ``RejectionConfig``, ``rejection_filter`` (expert iteration: SFT on the kept samples)
dpo.py      ``DPOConfig``, ``dpo_loss`` (sigmoid, hinge, ipo) and its logged rewards
distill.py  ``DistillConfig``, ``generalized_jsd`` (beta 1 reverse KL, 0 forward, 0.5 JSD)
==========  ====================================================================

:func:`make_config` builds a config by algorithm name (aliases such as ``rloo_k``
work); :func:`get_algorithm` returns the object the trainer calls for a config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from course_lib.algos.base import Algorithm, LossOutput
from course_lib.algos.distill import Distill, DistillConfig
from course_lib.algos.dpo import DPO, DPOConfig
from course_lib.algos.grpo import GRPO, GRPOConfig
from course_lib.algos.onpolicy import OnPolicyConfig
from course_lib.algos.ppo import PPO, PPOConfig
from course_lib.algos.rejection import Rejection, RejectionConfig
from course_lib.algos.rloo import RLOO, RLOOConfig
from course_lib.algos.sft import SFT, SFTConfig
from course_lib.config.tools import from_dict, resolve_keys, suggest

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "DPOConfig",
    "DistillConfig",
    "GRPOConfig",
    "LossOutput",
    "OnPolicyConfig",
    "PPOConfig",
    "RLOOConfig",
    "RejectionConfig",
    "SFTConfig",
    "config_class",
    "config_from_dict",
    "get_algorithm",
    "make_config",
]

#: Every algorithm the trainer runs, by name.
ALGORITHMS: dict[str, Algorithm] = {algorithm.name: algorithm for algorithm in
                                    (GRPO(), RLOO(), PPO(), SFT(), Rejection(), DPO(), Distill())}


#: Why ``export-trl`` (which writes a TRL ``GRPOConfig`` run) does not hand over the other algorithms.
NOT_EXPORTED: dict[str, str] = {
    "rloo": "TRL's RLOO and PPO trainers differ from the course's on-policy ones",
    "ppo": "TRL 1.16 has no PPOTrainer",
    "rejection": "TRL 1.16 has no rejection-sampling trainer (sample and filter, then trl sft on the kept rows)",
    "distill": "an on-policy distillation run maps to TRL's DistillationTrainer (same beta, temperature and teacher), "
               "whose YAML export is not written",
}


def _lookup(algo: str) -> Algorithm:
    key = str(algo).lower()
    if key not in ALGORITHMS:
        raise ValueError(f"algo={algo!r} is not known.{suggest(key, ALGORITHMS)} "
                         f"Fix: use one of {', '.join(sorted(ALGORITHMS))}.")
    return ALGORITHMS[key]


def config_class(algo: str) -> type:
    """The config dataclass of `algo` ("grpo", "rloo", "ppo", "sft", "rejection", "dpo", "distill")."""
    return _lookup(algo).config_class


def make_config(algo: str, preset: str | None = None, **overrides: Any) -> Any:
    """Build the config of `algo` ("grpo", "rloo", "ppo"); aliases such as `rloo_k` work.

    A field the algorithm does not have (say `loss_type` for RLOO) is refused with the list of
    fields; a field it has but the chosen loss type or aggregation never reads (`delta` with
    `loss_type="cispo"`, `scale_rewards` with `normalize_then_sum`) is refused by the config, so
    no knob is silently ignored (`LossType.reads`, `course_lib/algos/grpo.py`). `preset` names a set of values from
    `course_lib.presets.NAMED` (e.g. "older_trl_rloo"); `overrides` win over it.
    """
    cls = config_class(algo)
    if preset is not None:
        from course_lib.presets import named_preset

        overrides = {**named_preset(preset, algo), **resolve_keys(cls, overrides)}
    return cls(**resolve_keys(cls, overrides))


def config_from_dict(data: Mapping[str, Any]) -> Any:
    """Rebuild a config saved with `to_dict()`; its `algo` key picks the class."""
    if "algo" not in data:
        raise ValueError("the config dict has no 'algo' key. Fix: save configs with config.to_dict().")
    return from_dict(data, config_class(data["algo"]))


def get_algorithm(config) -> Algorithm:
    """A fresh algorithm object to train with `config` (picked by the config's class).

    Fresh, because an algorithm may keep per-run state (GRPO's adaptive entropy coefficient).
    """
    algorithm = _lookup(config.algo)
    if not isinstance(config, algorithm.config_class):
        raise TypeError(f"{type(config).__name__} is not a {algorithm.config_class.__name__}. "
                        f"Fix: build the config with course_lib.algos.make_config({config.algo!r}, ...).")
    return type(algorithm)()
