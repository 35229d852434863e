"""The loop's machinery: what the trainer calls around the learning, one floor above ``algos/`` and ``rollout/``.

Two lesson formulas live here because only a run has the batches they act on: DAPO's dynamic
sampling (lesson 13, ``dynamic_sampling.py``) and the staleness of asynchronous generation
(lesson 10, ``async_rollouts.sampled_version``). The helpers below the lessons sit in
``config/`` and ``common/``; the command line, above the trainer, in ``cli/``.

- ``batches.py``: the prompt sampler, the dataset's rows, the generated and the scored generation batch.
- ``loop_state.py``: where the loop is (counters, batch in flight, sampler position), as one object that
  checkpoints save and resume restores.
- ``sampled_batches.py``: an RL run's batch generator: sample, reward, score (steps 1 and 2 of the loop).
- ``dynamic_sampling.py``: drawing rounds until enough groups have a reward spread (DAPO).
- ``async_rollouts.py``: a worker process that samples the next batches while the trainer learns (the
  asynchronous batch generator).
- ``in_loop_eval.py``: held-out reward and greedy accuracy every ``eval_steps``.
- ``reward_log.py``: what reward functions log through TRL's ``log_metric``, averaged into the step's row.
- ``model_options.py``: what the model-side config fields do to a loaded policy.
- ``distributed.py``: processes through ``accelerate``, the per-process slice of a batch.
- ``nonfinite.py``: stop before a NaN/inf loss or gradient reaches the weights, and before
  NaN/inf weights are saved or resumed from.
- ``step_report.py``: what a run prints while it trains (the bar, notes, the closing line).
- ``history.py``: ``history.jsonl`` (one row of metrics per step) and printed samples.
- ``trainer_state.py``: what a trainer saves in a checkpoint, and its resume.
- ``checkpoint.py``, ``state_io.py``: kill-safe checkpoints, read without unpickling code.
- ``folder.py``: claiming an output folder, refusing to mix two runs in one.
- ``signals.py``: Ctrl-C, SIGTERM and SIGHUP save and stop at the next optimizer step.
- ``trainer_arguments.py``: TRL's ways of calling the trainer (``args=``, ``processing_class=``, a model
  name), and the inputs refused before anything loads.
- ``dataset_batches.py``: the batch generators that read the dataset instead of sampling (SFT's rows,
  DPO's pairs).
"""
