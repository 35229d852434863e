"""What SFT and DPO runs read instead of sampling, and how their data is made from a task.

- :mod:`course_lib.post_training.batches`: dataset rows (demonstrations, preference pairs) as
  the trainer's batches, with their checks (empty completions, chosen == rejected, rows longer
  than ``max_length``);
- :mod:`course_lib.post_training.conversations`: SFT's ``messages`` rows (whole chats) and the
  assistant-only mask, from rendering prefixes of each conversation;
- :mod:`course_lib.post_training.packing`: SFT's ``packing=True``, each micro-batch's examples in
  one row without attention across them;
- :mod:`course_lib.post_training.data`: SFT demonstrations from a task's answers, DPO pairs
  from a policy's own samples scored by the task's rewards.

The losses and configs are in ``course_lib.algos`` (``sft``, ``dpo``, ``rejection``,
``distill``); this package is the machinery around them (tokenisers, engines, the trainer).
"""
