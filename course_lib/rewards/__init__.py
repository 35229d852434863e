"""Reward functions and verifiers for RL on language models.

Every reward function has TRL's signature ``f(prompts, completions, **columns) ->
list[float | None]``: completions are strings (standard format) or lists of chat
messages (conversational format); dataset columns arrive by name (``answer=...``);
unknown keyword arguments are ignored; None means "does not apply to this sample".

Modules:
- ``extract``: text of a completion, ``<answer>`` tags, numbers, GSM8K ``####``, code blocks;
- ``formats``: length and ``<think>/<answer>`` format rewards (course, DeepSeek-R1);
- ``answers``: correctness, number-present and proximity rewards;
- ``gsm8k``: the GSM8K ``<reasoning>/<answer>`` reward family with its usual scores;
- ``execution``: unit tests run in ``course_lib.sandbox`` as a reward;
- ``combine``: ``rubric`` of weighted checks and ``compute_rewards`` (TRL's rules, async
  functions awaited concurrently);
- ``reward_model``: ``RewardModel``, a learned sequence-classification scorer as a reward;
- ``registry``: ``REWARD_FUNCTIONS`` by name;
- ``overlong``: DAPO's soft overlong punishment, a length penalty near the budget;
- ``calling``: calling a reward function with a time limit, on a copy of its inputs;
- ``equivalence``: answer equivalence through ``math-verify`` beside the course's number rules;
- ``probe``: degenerate completions scored beside a correct one, before training;
- ``flawed``: a plausible reward with a bug, the reward hack of lesson 09.
"""

from .answers import (
    ANSWER_EXTRACTORS,
    correctness_reward,
    make_correctness_reward,
    make_proximity_reward,
    number_reward,
    proximity_reward,
    proximity_score,
)
from .combine import (
    combine_rewards,
    RewardFunctionError,
    UnscorableSampleWarning,
    compute_rewards,
    no_rewards,
    predicate_reward,
    reward_function_name,
    rubric,
)
from .reward_model import RewardModel
from .execution import code_execution_reward, make_code_execution_reward, parse_tests
from .extract import (
    completion_text,
    completions_like,
    extract_answer_tag,
    extract_code_block,
    extract_first_number,
    extract_hash_answer,
    extract_last_number,
    extract_xml_answer,
    normalize_number,
    numbers_equal,
    parse_number,
    same_answer,
)
from .formats import (
    answer_tag_format_reward,
    format_reward,
    length_reward,
    make_think_answer_format_reward,
    think_answer_format_reward,
)
from .gsm8k import (
    gsm8k_correctness_reward,
    gsm8k_int_reward,
    gsm8k_soft_format_reward,
    gsm8k_strict_format_reward,
    gsm8k_xmlcount,
    gsm8k_xmlcount_reward,
)
from .equivalence import equivalent, make_math_verify_reward
from .overlong import soft_overlong_punishment
from .probe import probe_rewards
from .registry import REWARD_FUNCTIONS, get_reward_functions

__all__ = [
    "equivalent",
    "make_math_verify_reward",
    "probe_rewards",
    "no_rewards",
    "soft_overlong_punishment",
    "combine_rewards",
    "RewardModel",
    "ANSWER_EXTRACTORS",
    "REWARD_FUNCTIONS",
    "RewardFunctionError",
    "UnscorableSampleWarning",
    "answer_tag_format_reward",
    "code_execution_reward",
    "completion_text",
    "completions_like",
    "compute_rewards",
    "correctness_reward",
    "extract_answer_tag",
    "extract_code_block",
    "extract_first_number",
    "extract_hash_answer",
    "extract_last_number",
    "extract_xml_answer",
    "format_reward",
    "get_reward_functions",
    "gsm8k_correctness_reward",
    "gsm8k_int_reward",
    "gsm8k_soft_format_reward",
    "gsm8k_strict_format_reward",
    "gsm8k_xmlcount",
    "gsm8k_xmlcount_reward",
    "length_reward",
    "make_code_execution_reward",
    "make_correctness_reward",
    "make_proximity_reward",
    "make_think_answer_format_reward",
    "normalize_number",
    "number_reward",
    "numbers_equal",
    "parse_number",
    "parse_tests",
    "predicate_reward",
    "proximity_reward",
    "proximity_score",
    "reward_function_name",
    "rubric",
    "same_answer",
    "think_answer_format_reward",
]
