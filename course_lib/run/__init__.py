"""What a training run needs around the learning itself: no lesson formula lives here.

The lessons' path runs through ``algos/``, ``ops/``, ``rollout/``, ``rewards/``,
``trainer.py``, ``policy.py``, ``config.py`` and ``schedule.py``; this package holds the
machinery the trainer and the command line lean on:

- ``checkpoint.py``, ``state_io.py``: kill-safe checkpoints, read without unpickling code.
- ``folder.py``: claiming an output folder, refusing to mix two runs in one.
- ``history.py``: ``history.jsonl`` (one row of metrics per step) and printed samples.
- ``nonfinite.py``: stop before a NaN/inf loss or gradient reaches the weights, and before
  NaN/inf weights are saved or resumed from.
- ``lifeline.py``: the processes of a launched run die with the command that started them.
- ``distributed.py``: processes through ``accelerate``, the per-process slice of a batch.
- ``in_loop_eval.py``: held-out reward and greedy accuracy every ``eval_steps``.
- ``batches.py``: the prompt sampler and the scored generation batch.
- ``model_options.py``: what the model-side config fields do to a loaded policy.
- ``validation.py``, ``config_tools.py``: config checks, overrides, field docs, I/O.
- ``trl_fields.py``, ``export_trl.py``: the same run expressed as a TRL config and command.
- ``cli_train.py``: ``python -m course_lib train``.
"""
