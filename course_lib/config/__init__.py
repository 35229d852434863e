"""Training configuration: the fields every algorithm shares, their checks and their tools.

- ``rl_config.py``: :class:`RLConfig`, the fields GRPO, RLOO and PPO share, validated when built.
- ``validation.py``: the checks ``RLConfig`` runs (choices, types, ranges, run options).
- ``tools.py``: field help, overrides, suggestions for a misspelt field, dict I/O, the TRL config.
- ``trl_fields.py``: which of TRL 1.16's ``GRPOConfig`` fields the course supports, renames or leaves out, and why.

``from course_lib.config import RLConfig`` (and the other names below) is the public address.
"""

from .rl_config import ConfigWarning, RLConfig, apply_overrides, field_docs, fail, warn

__all__ = ["ConfigWarning", "RLConfig", "apply_overrides", "field_docs", "fail", "warn"]
