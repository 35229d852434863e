"""Maths that no single algorithm owns, shared by GRPO, RLOO and PPO.

- :mod:`~course_lib.ops.masking`: sums, means, variances and whitening over the valid
  tokens of padded ``(B, T)`` tensors; the block-diagonal attention mask of packed examples.
- :mod:`~course_lib.ops.stats`: NaN-aware spread and standardisation of rewards.
- :mod:`~course_lib.ops.kl`: the k1 / k2 / k3 estimators of KL(pi || ref).
- :mod:`~course_lib.ops.importance`: importance-sampling weights between the sampler and
  the trainer (TIS and TRL's four modes), and DeepSeek-V3.2's off-policy sequence mask,
  whose only user today is GRPO: it stays beside the weights because it compares the same
  trainer and sampler log-probs.
- :mod:`~course_lib.ops.logprobs`: token log-probs and entropies from hidden states, chunked
  so that the ``(B, T, V)`` logits never exist at once, and the one LM-head rule every
  caller uses; :mod:`~course_lib.ops.triton_logprobs`: the same as Triton kernels, the
  default on CUDA.
- :mod:`~course_lib.ops.top1`: whether each target token is the argmax of its logits (TRL's
  ``is_top1``, SFT's ``mean_token_accuracy``), by a gradient-free chunked pass of the LM head.
- :mod:`~course_lib.ops.entropy`: the high-entropy token mask and the entropy bonus, and
  ``AdaptiveEntropyCoef``, the one stateful object here (a controller that steers the bonus
  between steps); GRPO is their only user today, they stay here because they act on the
  entropies any algorithm's forward returns.

No module imports the trainer, an engine or a widget.
"""
