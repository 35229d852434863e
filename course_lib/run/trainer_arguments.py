"""TRL's ways of calling the trainer, read into the course's: ``Trainer(config, reward_funcs,
train_dataset, model)`` also takes ``model`` as a name or folder (TRL's model id), ``args=``
(TRL's name for the config), ``processing_class=`` (its name for the tokenizer) and a single
reward function without a list. TRL's own order, ``GRPOTrainer(model, reward_funcs, args,
train_dataset)``, is refused with the call to write instead of failing deep inside.
"""

from __future__ import annotations

import dataclasses
import os
import warnings


def trl_style_arguments(config, reward_funcs, train_dataset, model, tokenizer, args, processing_class,
                        environment_factory=None, correct_fn=None):
    """``(config, reward_funcs, model, tokenizer)`` from the ways TRL's ``GRPOTrainer`` is called.

    ``GRPOTrainer(model, reward_funcs, args, train_dataset, ...)`` puts the model first; here the
    config comes first, so a model name in that place is refused with the keyword call to use.
    """
    from ..config import RLConfig

    if args is not None:
        if config is not None:
            raise ValueError("config and args= are both given; args= is TRL's name for the config. Fix: pass one.")
        config = args
    if processing_class is not None:
        if tokenizer is not None:
            raise ValueError("tokenizer and processing_class= are both given (TRL's name for the tokenizer). Fix: "
                             "pass one.")
        tokenizer = processing_class
    if not isinstance(config, RLConfig):
        raise TypeError(f"Trainer's first argument is the config (GRPOConfig, RLOOConfig or PPOConfig), not a "
                        f"{type(config).__name__}. TRL's GRPOTrainer(model, reward_funcs, args, train_dataset) puts "
                        "the model first; here write Trainer(config, reward_funcs, train_dataset, model) or "
                        "Trainer(model=..., reward_funcs=..., args=config, train_dataset=...).")
    if train_dataset is None:
        raise ValueError("train_dataset is missing. Fix: pass the rows to train on (a datasets.Dataset with a "
                         "'prompt' column).")
    if callable(reward_funcs):  # TRL takes a single reward function as it is
        reward_funcs = [reward_funcs]
    if not reward_funcs and environment_factory is None and getattr(config, "NEEDS_REWARD_FUNCS", True):
        raise ValueError("reward_funcs is empty: pass at least one reward function.")
    check_correct_fn_use(correct_fn, evaluating=config.eval_strategy != "no")
    if isinstance(model, (str, os.PathLike)):  # a name or a folder, loaded as TRL loads a model id
        name = str(model)
        if name != config.model_name_or_path:
            config = dataclasses.replace(config, model_name_or_path=name)
        model = None
    return config, reward_funcs, model, tokenizer




#: Arguments the reward call passes itself, so no dataset column may carry these names.
REWARD_ARGUMENTS = frozenset({"prompts", "completions", "completion_ids", "environments", "trainer_state",
                              "log_metric"})


def check_trainer_inputs(config, train_dataset, model, tokenizer) -> None:
    """Refuse, before anything loads, a dataset with fewer rows than one generation batch, a column
    the reward call already passes (it would be blamed on a reward function later) and a model
    given without its tokenizer."""
    if len(train_dataset) < config.unique_prompts_per_generation:
        raise ValueError(f"train_dataset has {len(train_dataset)} rows but one generation batch needs "
                         f"{config.unique_prompts_per_generation} distinct prompts; add rows or lower "
                         "per_device_train_batch_size / steps_per_generation.")
    clashing = sorted(set(train_dataset.column_names) & REWARD_ARGUMENTS)
    if clashing:
        raise ValueError(f"train_dataset has a column named {clashing[0]!r}, a name the reward functions already "
                         f"receive as an argument ({', '.join(sorted(REWARD_ARGUMENTS))}). Fix: rename the "
                         f"column, e.g. dataset.rename_column({clashing[0]!r}, 'reference_{clashing[0]}').")
    if model is not None and tokenizer is None:
        raise ValueError("Trainer got a model but tokenizer=None: the prompts cannot be encoded. Fix: pass the "
                         "model's tokenizer too (model, tokenizer = load_policy(...)), or pass neither and set "
                         "config.model_name_or_path.")


def require_sandboxes(reward_funcs) -> None:
    """Refuse a reward function that runs code (``needs_sandbox``) where no sandbox works, when the
    trainer is built rather than at the first completion holding code."""
    from ..rewards import reward_function_name

    for function in reward_funcs:
        if getattr(function, "needs_sandbox", False):
            from ..sandbox.isolation import require_isolation

            require_isolation(f"reward function {reward_function_name(function)!r}")


def load_model(config, model, tokenizer):
    """``(model, tokenizer)``: the ones given, else loaded from ``config.model_name_or_path``; a
    given tokenizer wins over the loaded one (TRL's ``processing_class``)."""
    if model is not None:
        return model, tokenizer
    from ..models import load_policy
    from .model_options import load_kwargs

    model, loaded = load_policy(config.model_name_or_path, **load_kwargs(config))
    return model, loaded if tokenizer is None else tokenizer


def check_correct_fn_use(correct_fn, evaluating: bool) -> None:
    """Refuse a ``correct_fn`` that cannot be called as ``f(completion, answer)``; warn when no
    evaluation during training reads it (it would be silently unused)."""
    from ..evaluation import check_correct_fn

    if correct_fn is None:
        return
    check_correct_fn(correct_fn)
    if not evaluating:
        warnings.warn("correct_fn is read only by the evaluation during training (eval_strategy='steps' with an "
                      "eval_dataset), which this config does not run, so it is unused. Fix: set "
                      "eval_strategy='steps' and eval_steps, or pass correct_fn to evaluate_accuracy for a "
                      "before/after accuracy (the command line's --correct does both).", UserWarning, stacklevel=3)
