"""The command line's own modules, on the top floor: they import the trainer, never the reverse.

- ``train.py``: ``python -m course_lib train`` (and ``correct``): arguments, the run, the launcher.
- ``lifeline.py``: the processes of a launched run die with the command that started them.
- ``export_trl.py``: the same run written as a TRL config and command (``export-trl``).
- ``probe_rewards.py``: degenerate completions scored beside a correct one (``probe-rewards``).
- ``export_rewards.py``: the reward functions of that export, as a module TRL imports.
"""
