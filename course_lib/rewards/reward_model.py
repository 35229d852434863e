"""A learned reward model as a reward function (RLHF's reward model, Ouyang et al. 2022).

TRL accepts a sequence-classification model among its reward functions and scores each
prompt + completion with the model's single output logit. :class:`RewardModel` does the
same behind the ordinary reward-function signature, so it combines with rule-based rewards
(weights, rubrics, `compute_rewards`). It loads from a local folder only (no download at
run time).

Text the model reads: for conversations, the prompt messages followed by the completion
messages through the reward model's own chat template; for plain text, prompt + completion.
Tokens are right-padded; the score is `logits[:, 0]`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch


class RewardModel:
    """`f(prompts, completions, **_) -> list[float]` backed by a `AutoModelForSequenceClassification`.

    Args:
        model: a folder holding the model and its tokenizer, or a loaded model.
        tokenizer: required when `model` is a loaded model.
        batch_size: completions scored per forward pass.
        chat_template_kwargs: extra arguments for the tokenizer's chat template.
        name: the name in metrics (`rewards/<name>/mean`); default the folder's name.

    Raises:
        ValueError: the folder does not exist, or the model's head has more than one output
            (a classifier with `num_labels` > 1 is not a scalar reward).
    """

    def __init__(self, model: str | Path | torch.nn.Module, tokenizer=None, *, batch_size: int = 16,
                 chat_template_kwargs: dict[str, Any] | None = None, name: str | None = None):
        if isinstance(model, (str, Path)):
            from transformers import AutoModelForSequenceClassification, AutoTokenizer

            path = Path(model)
            if not path.is_dir():
                raise ValueError(f"reward model path {str(model)!r} is not a local folder. Fix: save the model "
                                 "with save_pretrained(folder) (and its tokenizer) and pass that folder.")
            name = name or path.name
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            model = AutoModelForSequenceClassification.from_pretrained(path)
        if tokenizer is None:
            raise ValueError("RewardModel got a loaded model without its tokenizer. Fix: pass tokenizer=...")
        labels = getattr(model.config, "num_labels", 1)
        if labels != 1:
            raise ValueError(f"the reward model's head has num_labels={labels}: it classifies, it does not score. "
                             "Fix: use a reward model with a single output (num_labels=1), e.g. one trained with "
                             "trl.RewardTrainer.")
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        if getattr(model.config, "pad_token_id", None) is None:
            model.config.pad_token_id = tokenizer.pad_token_id  # the head reads the last non-pad token
        self.model, self.tokenizer = model.eval(), tokenizer
        self.batch_size, self.chat_template_kwargs = batch_size, dict(chat_template_kwargs or {})
        self.__name__ = name or type(model).__name__

    def texts(self, prompts: Sequence[Any], completions: Sequence[Any]) -> list[str]:
        """What the reward model reads for each (prompt, completion) pair."""
        if isinstance(prompts[0], list):
            return [self.tokenizer.apply_chat_template(list(p) + list(c), tokenize=False, **self.chat_template_kwargs)
                    for p, c in zip(prompts, completions)]
        return [p + c for p, c in zip(prompts, completions)]

    @torch.no_grad()
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_) -> list[float]:
        texts = self.texts(prompts, completions)
        device = next(self.model.parameters()).device
        scores: list[float] = []
        for start in range(0, len(texts), self.batch_size):
            inputs = self.tokenizer(texts[start:start + self.batch_size], return_tensors="pt", padding=True,
                                    padding_side="right", add_special_tokens=False).to(device)
            scores += self.model(**inputs).logits[:, 0].float().tolist()
        return scores
