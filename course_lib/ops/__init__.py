"""Maths that no single algorithm owns, shared by GRPO, RLOO and PPO.

- :mod:`~course_lib.ops.masking`: sums, means, variances and whitening over the valid
  tokens of padded ``(B, T)`` tensors.
- :mod:`~course_lib.ops.stats`: NaN-aware spread and standardisation of rewards.
- :mod:`~course_lib.ops.kl`: the k1 / k2 / k3 estimators of KL(pi || ref).
- :mod:`~course_lib.ops.importance`: importance-sampling weights between the sampler and
  the trainer (TIS and TRL's four modes).
- :mod:`~course_lib.ops.logprobs`: token log-probs and entropies from hidden states, chunked
  so that the ``(B, T, V)`` logits never exist at once, and the one LM-head rule every
  caller uses.

Each module is pure tensor code: no trainer, engine or widget imports.
"""
