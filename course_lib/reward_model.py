"""The "H" of RLHF: a reward model learned from preference pairs (Bradley-Terry).

A person (or a simulated labeller) sees two completions of the same prompt and says which
is better. The Bradley-Terry model (Bradley & Terry 1952) explains such choices with a
hidden score per completion: ``P(a preferred to b) = sigmoid(s(a) - s(b))``. A reward
model is a network that outputs that score; it is trained by maximising the likelihood of
the observed choices (InstructGPT, Ouyang et al. 2022, eq. 1; TRL's ``RewardTrainer``):

    loss = -mean(log sigmoid(s(chosen) - s(rejected) - margin))

- :func:`bradley_terry_loss`: that loss, with TRL's optional margin and centring term.
- :class:`RewardModel`: a transformer body plus a linear scalar head read at each
  sequence's last real token (the "sequence classification" head of TRL's reward models).
- :func:`simulated_preferences`: pairs of completions labelled by a Bradley-Terry
  labeller from a hidden true score, so a lesson can compare the learned reward with the
  truth it was learned from.
- :func:`train_reward_model`, :func:`preference_accuracy`: the training loop and its metric.
- :func:`reward_model_function`: the trained model as a reward function with TRL's
  signature, to hand to PPO or GRPO.

Simplifications compared with TRL's ``RewardTrainer``: one process, plain Adam on whole
mini-batches (no accumulation, no scheduler), prompts rendered with the tokenizer's chat
template and joined to the completion text, no truncation beyond the model's positions.
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .models import eval_mode
from .rewards import completion_text


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor, margin: torch.Tensor | float | None = None,
                       center_coefficient: float | None = None) -> torch.Tensor:
    """Negative log-likelihood of the preferences under Bradley-Terry, averaged over pairs.

    ``-mean(log sigmoid(chosen - rejected - margin))``, computed with ``logsigmoid`` (no
    ``log(sigmoid(x))``, which underflows to ``-inf`` for very negative x). With
    ``center_coefficient`` it adds ``coefficient * mean((chosen + rejected)^2)``, TRL's
    ``center_rewards_coefficient`` (Eisenstein et al. 2023), which pins the scores' free
    offset near 0 (the likelihood only sees differences).

    Args:
        chosen, rejected: ``(N,)`` scores of the preferred and the other completion.
        margin: ``(N,)`` or a number: how much the chosen one must win by (Llama 2's
            margin); None for none.
        center_coefficient: weight of the centring term; None or 0 for none.
    Returns:
        A scalar tensor.
    """
    if chosen.shape != rejected.shape:
        raise ValueError(f"chosen has shape {tuple(chosen.shape)} but rejected {tuple(rejected.shape)}: "
                         "give one score of each per pair.")
    difference = chosen - rejected
    if margin is not None:
        difference = difference - margin
    loss = -F.logsigmoid(difference).mean()
    if center_coefficient:
        loss = loss + center_coefficient * ((chosen + rejected) ** 2).mean()
    return loss


class RewardModel(nn.Module):
    """A transformer body and a scalar head: one score per sequence.

    ``body`` is a Hugging Face decoder (``LlamaModel`` and the like) returning
    ``last_hidden_state``; the head is one linear layer read at the last position whose
    ``attention_mask`` is 1, so right padding is ignored.
    """

    def __init__(self, body: nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        self.head = nn.Linear(hidden_size, 1)

    @classmethod
    def from_causal_lm(cls, causal_lm: nn.Module, seed: int = 0) -> "RewardModel":
        """A reward model that starts from a copy of a language model's body (InstructGPT
        initialises its reward model from the SFT policy); the LM head is dropped.

        The scalar head is drawn from its own generator seeded with ``seed`` (the global
        random state is left as it was), so the same call gives the same reward model
        whatever ran before it."""
        body = copy.deepcopy(causal_lm.get_decoder())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return cls(body, causal_lm.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """``(B, L)`` right-padded ids and mask -> ``(B,)`` scores."""
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, L, H)
        last = (attention_mask.sum(dim=1) - 1).clamp(min=0)  # (B,) index of the last real token
        return self.head(hidden[torch.arange(hidden.shape[0]), last]).squeeze(-1)  # (B,)


def _texts(tokenizer, prompts: Sequence, completions: Sequence) -> list[str]:
    """Prompt (chat template applied when it is a message list) followed by the completion."""
    texts = []
    for prompt, completion in zip(prompts, completions):
        if isinstance(prompt, str):
            head = prompt
        else:
            head = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
        texts.append(head + completion_text(completion))
    return texts


def score_texts(model: RewardModel, tokenizer, prompts: Sequence, completions: Sequence,
                batch_size: int = 64) -> torch.Tensor:
    """``(N,)`` scores of the completions (with their prompts), without gradient."""
    scores = []
    with eval_mode(model), torch.no_grad():
        for start in range(0, len(completions), batch_size):
            scores.append(_forward(model, tokenizer, prompts[start:start + batch_size],
                                   completions[start:start + batch_size]))
    return torch.cat(scores) if scores else torch.zeros(0)


def _forward(model: RewardModel, tokenizer, prompts: Sequence, completions: Sequence) -> torch.Tensor:
    encoded = tokenizer(_texts(tokenizer, prompts, completions), return_tensors="pt", padding=True,
                        padding_side="right", add_special_tokens=False)
    device = next(model.parameters()).device
    return model(encoded["input_ids"].to(device), encoded["attention_mask"].to(device))


@dataclass
class PreferencePairs:
    """``N`` labelled comparisons: for prompt i, ``chosen[i]`` was preferred to ``rejected[i]``."""

    prompts: list
    chosen: list[str]
    rejected: list[str]

    def __len__(self) -> int:
        return len(self.chosen)

    def split(self, test_fraction: float, seed: int = 0) -> tuple["PreferencePairs", "PreferencePairs"]:
        """A seeded random split into (train, test)."""
        order = list(range(len(self)))
        random.Random(seed).shuffle(order)
        cut = len(order) - int(round(test_fraction * len(order)))

        def take(rows):
            return PreferencePairs([self.prompts[i] for i in rows], [self.chosen[i] for i in rows],
                                   [self.rejected[i] for i in rows])

        return take(order[:cut]), take(order[cut:])


def simulated_preferences(prompts: Sequence, completions_a: Sequence[str], completions_b: Sequence[str],
                          true_scores_a: Sequence[float], true_scores_b: Sequence[float], *,
                          temperature: float = 1.0, seed: int = 0) -> PreferencePairs:
    """Label each pair as a Bradley-Terry labeller with a hidden true score would.

    Completion a is preferred with probability ``sigmoid((true_a - true_b) / temperature)``:
    a clear difference is labelled right almost always, a small one is a coin flip, as with
    human labellers. ``temperature`` > 0 sets the labelling noise. Pairs whose completions
    are identical are dropped (a comparison of a text with itself says nothing).
    """
    if temperature <= 0:
        raise ValueError(f"temperature={temperature}: the labeller's noise must be positive.")
    generator = random.Random(seed)
    kept_prompts, chosen, rejected = [], [], []
    for prompt, a, b, score_a, score_b in zip(prompts, completions_a, completions_b, true_scores_a, true_scores_b):
        if a == b:
            continue
        prefer_a = generator.random() < 1.0 / (1.0 + math.exp(-(score_a - score_b) / temperature))
        kept_prompts.append(prompt)
        chosen.append(a if prefer_a else b)
        rejected.append(b if prefer_a else a)
    return PreferencePairs(kept_prompts, chosen, rejected)


def preference_accuracy(model: RewardModel, tokenizer, pairs: PreferencePairs) -> float:
    """Fraction of pairs where the model scores the chosen completion strictly higher."""
    chosen = score_texts(model, tokenizer, pairs.prompts, pairs.chosen)
    rejected = score_texts(model, tokenizer, pairs.prompts, pairs.rejected)
    return float((chosen > rejected).float().mean())


def train_reward_model(model: RewardModel, tokenizer, pairs: PreferencePairs, *, epochs: int = 1,
                       batch_size: int = 32, learning_rate: float = 1e-4, center_coefficient: float | None = None,
                       seed: int = 0, test_pairs: PreferencePairs | None = None,
                       train_accuracy: bool = True) -> list[dict]:
    """Fit the reward model to the preferences; one row of metrics per epoch.

    Each row: ``epoch``, ``loss`` (mean Bradley-Terry loss over the epoch's mini-batches),
    ``train_accuracy`` (unless ``train_accuracy=False``: scoring every training pair again
    costs a third of an epoch) and, with ``test_pairs``, ``test_accuracy``
    (:func:`preference_accuracy`).
    """
    if len(pairs) == 0:
        raise ValueError("pairs is empty: give at least one labelled comparison.")
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    order = list(range(len(pairs)))
    shuffler = random.Random(seed)
    history = []
    model.train()
    for epoch in range(1, epochs + 1):
        shuffler.shuffle(order)
        losses = []
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            prompts = [pairs.prompts[i] for i in rows]
            both = _forward(model, tokenizer, prompts + prompts,
                            [pairs.chosen[i] for i in rows] + [pairs.rejected[i] for i in rows])  # (2n,)
            loss = bradley_terry_loss(both[:len(rows)], both[len(rows):], center_coefficient=center_coefficient)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        row = {"epoch": epoch, "loss": sum(losses) / len(losses)}
        if train_accuracy:
            row["train_accuracy"] = preference_accuracy(model, tokenizer, pairs)
        if test_pairs is not None:
            row["test_accuracy"] = preference_accuracy(model, tokenizer, test_pairs)
        history.append(row)
    model.eval()
    return history


def reward_model_function(model: RewardModel, tokenizer, name: str = "reward_model") -> Callable:
    """The reward model as a reward function with TRL's signature ``f(prompts, completions, **kwargs)``."""
    model.eval()

    def reward(prompts, completions, **kwargs) -> list[float]:
        return score_texts(model, tokenizer, list(prompts), list(completions)).tolist()

    reward.__name__ = name
    return reward
