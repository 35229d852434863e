"""Loaded at start-up by the child processes that run TRL's GRPO or RLOO trainer on a CPU in
the tests (see ``trl_child.py``): vLLM counts as not installed there.

TRL imports vLLM whenever it finds it installed (``from trl import GRPOTrainer`` takes about
17 CPU s with it, 10 without), and these runs never use it (``use_vllm=False``). A ``None``
entry in ``sys.modules`` makes ``importlib.util.find_spec("vllm")`` answer ``None``, which
TRL's availability check reads as "not installed".
"""

import sys

sys.modules.setdefault("vllm", None)
