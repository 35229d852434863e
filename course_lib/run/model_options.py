"""What the model-side options of :class:`course_lib.config.RLConfig` do to a policy.

- :func:`load_kwargs`: the extra `from_pretrained` arguments (`model_init_kwargs`,
  `trust_remote_code`) for loading the policy by name.
- :func:`apply_model_options`: `disable_dropout` (every dropout probability set to 0, so the
  trainer's log-probs match the sampler's and the reference's) and `cast_lm_head_to_fp32`
  (the LM head in float32 under a lower-precision body, ScaleRL, arXiv 2510.13786: the
  log-probs that form the importance ratio lose less precision).
- :func:`mix_into_reference`: `sync_ref_model`, the reference moved toward the policy
  (TR-DPO, Gorbatovski et al. 2024, "Learn Your Reference Model for Real Good Alignment").
"""

from __future__ import annotations

from typing import Any

import torch


def load_kwargs(config) -> dict[str, Any]:
    """Keyword arguments for `load_policy` beyond the name and dtype."""
    kwargs = dict(config.model_init_kwargs or {})
    if config.trust_remote_code:
        kwargs["trust_remote_code"] = True
    return kwargs


def disable_dropout(model: torch.nn.Module) -> int:
    """Set every dropout probability of `model` to 0; return how many were non-zero.

    Covers `torch.nn.Dropout*` modules and the float rates attention layers keep as
    attributes (`attention_dropout`, `dropout`, read at each forward in training mode).
    """
    count = 0
    for module in model.modules():
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            count += module.p > 0
            module.p = 0.0
        for name in ("attention_dropout", "attn_dropout", "dropout"):
            value = getattr(module, name, None)
            if isinstance(value, float):
                count += value > 0
                setattr(module, name, 0.0)
    config = getattr(model, "config", None)  # so that copies built from the config agree
    if config is not None and isinstance(getattr(config, "attention_dropout", None), float):
        config.attention_dropout = 0.0
    return int(count)


def cast_lm_head_to_fp32(model: torch.nn.Module) -> None:
    """Keep the output head in float32: its weight, its input (cast on the way in) and its logits.

    Raises:
        ValueError: when the head shares its weight with the input embeddings (casting it
            would cast the embeddings too); TRL 1.16 has the same restriction.
    """
    head = model.get_output_embeddings()
    embeddings = model.get_input_embeddings()
    if head is None:
        raise ValueError("cast_lm_head_to_fp32=True but the model has no output head. Fix: set it to False.")
    if embeddings is not None and head.weight is embeddings.weight:
        raise ValueError("cast_lm_head_to_fp32=True needs an LM head that is not tied to the input embeddings "
                         "(tie_word_embeddings=True here, as in SmolLM2). Fix: set cast_lm_head_to_fp32=False, "
                         "or use a model with an untied head.")
    head.float()
    if not getattr(head, "_course_fp32_hook", False):
        head.register_forward_pre_hook(lambda module, args: tuple(a.float() if torch.is_tensor(a) else a
                                                                  for a in args))
        head._course_fp32_hook = True


def apply_model_options(model: torch.nn.Module, config) -> torch.nn.Module:
    """Apply `disable_dropout` and `cast_lm_head_to_fp32` to `model` in place; return it."""
    if config.disable_dropout:
        disable_dropout(model)
    if config.cast_lm_head_to_fp32:
        cast_lm_head_to_fp32(model)
    return model


@torch.no_grad()
def mix_into_reference(reference: torch.nn.Module, policy: torch.nn.Module, alpha: float) -> None:
    """`ref <- alpha * policy + (1 - alpha) * ref`, parameter by parameter, in place.

    Raises:
        ValueError: when the two models' parameters do not correspond by name and shape.
    """
    policy_params = dict(policy.named_parameters())
    for name, target in reference.named_parameters():
        source = policy_params.get(name)
        if source is None or source.shape != target.shape:
            raise ValueError(f"sync_ref_model: the reference's {name!r} has no twin in the policy. Fix: "
                             "set sync_ref_model=False for this model.")
        target.mul_(1.0 - alpha).add_(source.to(target.dtype), alpha=alpha)


def make_optimizer(model, value_head, config):
    """AdamW over the trainable parameters (and PPO's value head, at ``value_learning_rate`` when
    set), with the config's betas, epsilon and weight decay: TRL's default optimizer. The fused
    kernel updates all parameters in one pass where their dtypes allow it."""
    import torch

    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": parameters}]
    if value_head is not None:
        value_lr = getattr(config, "value_learning_rate", None)
        groups.append({"params": list(value_head.parameters()), **({} if value_lr is None else {"lr": value_lr})})
        parameters = parameters + groups[-1]["params"]
    return torch.optim.AdamW(groups, lr=config.learning_rate, betas=(config.adam_beta1, config.adam_beta2),
                             eps=config.adam_epsilon, weight_decay=config.weight_decay,
                             fused=all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in parameters))
