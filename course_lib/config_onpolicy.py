"""RLOO and PPO configurations (TRL's older "on-policy" trainers).

Both inherit every field of `RLConfig` (config.py). The seed documents of these
trainers name four existing concepts differently; here each is stored once and the
seed's name is an alias, accepted by `make_config` / `apply_overrides` / `from_dict` and
readable as a property:

    rloo_k -> num_generations, kl_coef -> beta, num_ppo_epochs -> num_iterations,
    cliprange -> epsilon.

`num_mini_batches` (optimizer steps per generation batch) is expressed through the
shared batch arithmetic: it sets `steps_per_generation = num_mini_batches *
gradient_accumulation_steps`.

Defaults follow the seed documents (old TRL `RLOOConfig` / `PPOConfig`): KL coefficient
0.05, 4 PPO epochs, temperature 0.7. TRL 1.16's rewritten `RLOOConfig` differs (one
epoch, temperature 1.0, `normalize_advantages`, a (min, max) `reward_clip_range` applied
always); the trainer follows the seed's semantics.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from course_lib.config import RLConfig, _fail
from course_lib.config_tools import register

__all__ = ["OnPolicyConfig", "PPOConfig", "RLOOConfig"]


def _alias(target: str, doc: str) -> property:
    return property(lambda self: getattr(self, target), doc=doc)


@dataclass(frozen=True)
class OnPolicyConfig(RLConfig):
    """Fields shared by RLOO and PPO, which follow TRL's older on-policy trainers."""

    ALIASES: ClassVar[dict[str, str]] = {
        "kl_coef": "beta",
        "num_ppo_epochs": "num_iterations",
        "cliprange": "epsilon",
    }

    beta: float = 0.05
    """KL coefficient (`kl_coef` in the seed docs): subtracted from the reward as beta * KL(pi ||
    pi_ref) (Ziegler et al. 2019), not added to the loss as in GRPO."""
    num_iterations: int = 4
    """PPO epochs over each generation batch (`num_ppo_epochs`, default 4); 1 with one mini-batch
    gives REINFORCE / A2C ("A2C is a special case of PPO", Huang et al. 2022)."""
    temperature: float = 0.7
    """Sampling temperature (TRL's on-policy default 0.7)."""
    num_mini_batches: int | None = None
    """Optimizer steps per generation batch; sets steps_per_generation = num_mini_batches *
    gradient_accumulation_steps. None means 1 (the seed's default)."""
    whiten_rewards: bool = False
    """Whiten the per-token rewards over the batch before computing advantages, keeping their mean
    ("The N+ Implementation Details of RLHF with PPO", Huang et al. 2024)."""
    missing_eos_penalty: float | None = None
    """The "EOS trick": subtract this from the score of completions that never emit EOS; None
    disables (Huang et al. 2024 use 1.0)."""

    kl_coef = _alias("beta", "Seed name of `beta`.")
    num_ppo_epochs = _alias("num_iterations", "Seed name of `num_iterations`.")
    cliprange = _alias("epsilon", "Seed name of `epsilon`.")

    def _requested_steps_per_generation(self) -> int | None:
        if self.num_mini_batches is None:
            return self.steps_per_generation
        if self.num_mini_batches < 1:
            _fail("num_mini_batches", self.num_mini_batches, "must be None or at least 1", "use 1")
        if self.steps_per_generation is not None:
            _fail("num_mini_batches", self.num_mini_batches, f"is set together with steps_per_generation="
                  f"{self.steps_per_generation}; each determines the other", "set only one of the two")
        return self.num_mini_batches * self.gradient_accumulation_steps


@register
@dataclass(frozen=True)
class RLOOConfig(OnPolicyConfig):
    """REINFORCE Leave-One-Out (Ahmadian et al. 2024, "Back to Basics") with the Reinforce++ options
    (Hu 2025)."""

    algo: ClassVar[str] = "rloo"
    ALIASES: ClassVar[dict[str, str]] = {**OnPolicyConfig.ALIASES, "rloo_k": "num_generations",
                                         "normalize_advantages": "normalize_advantage"}

    num_generations: int = 2
    """Completions per prompt, K of RLOO (`rloo_k`, default 2); the baseline of each is the mean of
    the other K - 1."""
    token_level_kl: bool = False
    """Reinforce++ (Hu 2025, eq. 1): KL penalty per token instead of summed per sequence. Default
    False as in TRL's code signature; the seed's parameter list says True, which contradicts it."""
    normalize_reward: bool = False
    """Reinforce++: standardise the scores over the batch, then clip them to +-reward_clip_range."""
    reward_clip_range: float = 10.0
    """Reinforce++: clip range applied to the normalised scores (only with normalize_reward, as in
    TRL's RLOO)."""
    normalize_advantage: bool = False
    """Reinforce++: standardise the advantages over the batch to mean 0, std 1."""

    rloo_k = _alias("num_generations", "Seed name of `num_generations`.")

    def _check_ranges(self) -> None:
        super()._check_ranges()
        if not self.reward_clip_range > 0:
            _fail("reward_clip_range", self.reward_clip_range, "must be > 0", "use the seed's 10.0")


@register
@dataclass(frozen=True)
class PPOConfig(OnPolicyConfig):
    """Proximal Policy Optimization with a value head and GAE (Schulman et al. 2017, 2016)."""

    algo: ClassVar[str] = "ppo"
    MIN_GENERATIONS: ClassVar[int] = 1

    num_generations: int = 1
    """Completions per prompt; PPO needs no group, its baseline is the value function."""
    vf_coef: float = 0.1
    """Weight of the value loss in the total loss."""
    cliprange_value: float = 0.2
    """Clip the new value to old value +- cliprange_value in the value loss."""
    gamma: float = 1.0
    """Discount factor of GAE; 1.0 for episodic text."""
    lam: float = 0.95
    """GAE lambda: 0 = one-step TD, 1 = Monte Carlo (Schulman et al. 2016)."""
    use_separate_value_model: bool = False
    """Train the value function as its own model instead of a head on the policy."""

    def _check_ranges(self) -> None:
        super()._check_ranges()
        for name in ("vf_coef", "cliprange_value"):
            if getattr(self, name) < 0:
                _fail(name, getattr(self, name), "must be non-negative", f"set {name} >= 0")
        for name in ("gamma", "lam"):
            if not 0 <= getattr(self, name) <= 1:
                _fail(name, getattr(self, name), "must lie in [0, 1]", "use gamma=1.0, lam=0.95")
