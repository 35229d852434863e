"""SFT, rejection sampling, DPO and on-policy distillation: the small functions, the configs,
the trainer end to end on the tiny model, and the bad inputs each must refuse or report.

The losses' parity with TRL 1.16 is in ``test_losses_trl_parity_post_training.py``.
"""

from __future__ import annotations

import copy
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from datasets import Dataset

from course_lib.algos import make_config
from course_lib.algos.dpo import dpo_loss
from course_lib.algos.distill import check_teacher, reverse_kl_token_advantages
from course_lib.post_training.data import preference_pairs
from course_lib.algos.rejection import EmptyRoundWarning, rejection_filter
from course_lib.algos.sft import (pack_examples, packed_attention_mask, packed_logps, sft_loss,
                                  sft_microbatch_train_step, tokenize_prompt_and_output)
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.policy import completion_forward
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer
from post_training_rows import pair_rows, sft_rows

ROOT = Path(__file__).resolve().parents[2]
CORRECT = get_reward_functions(["correctness_first_number_reward"])
COMMON = dict(model_name_or_path="tiny", max_steps=2, learning_rate=1e-3, per_device_train_batch_size=4,
              max_completion_length=6, logging_steps=1, save_steps=0, seed=3)


@pytest.fixture(scope="module")
def tiny():
    model, tokenizer = load_policy("tiny", dtype="float32")
    return model, tokenizer


def _fresh(tiny):
    return copy.deepcopy(tiny[0]), tiny[1]




# ---------------------------------------------------------------------------------------
# Small functions, against hand-worked values
# ---------------------------------------------------------------------------------------
def test_tokenize_prompt_and_output_shifts_by_one_and_masks_the_output(tiny):
    _, tokenizer = tiny
    rows = tokenize_prompt_and_output(["ab", "c"], ["12", "345"], tokenizer)
    ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    full0, full1 = ids("ab") + ids("12"), ids("c") + ids("345")  # one token per character: 4 each
    assert rows.input_ids.shape == rows.labels.shape == rows.response_mask.shape == (2, 3)
    assert rows.input_ids[0].tolist() == full0[:3] and rows.labels[0].tolist() == full0[1:4]
    assert rows.labels[1].tolist() == full1[1:4]
    # row 0: labels "b", "1", "2" -> mask 0, 1, 1; row 1: labels "3", "4", "5" -> 1, 1, 1
    assert rows.response_mask.tolist() == [[0, 1, 1], [1, 1, 1]]
    cut = tokenize_prompt_and_output(["ab"], ["12345"], tokenizer, max_length=4)
    assert cut.truncated == 1 and cut.input_ids.shape == (1, 3)
    with pytest.raises(ValueError, match="empty"):
        tokenize_prompt_and_output(["ab"], [""], tokenizer)


def test_sft_loss_is_the_token_mean_and_accumulation_divides_by_the_window():
    logps = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert sft_loss(logps, mask).item() == pytest.approx((1 + 2 + 3) / 3)
    assert sft_loss(logps, mask, num_items_in_batch=6).item() == pytest.approx(6 / 6)
    assert sft_loss(logps, torch.zeros_like(mask)).item() == 0.0  # no token: 0, not NaN


def test_sft_microbatch_train_step_matches_cs336_semantics():
    logps = torch.tensor([[-1.0, -2.0, -4.0], [-3.0, -5.0, -7.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [0, 1, 1]])
    loss, meta = sft_microbatch_train_step(logps, mask, gradient_accumulation_steps=2, normalize_constant=2.0)
    # per row: (1 + 2) / 2 = 1.5 and (5 + 7) / 2 = 6; mean 3.75; / 2 accumulation steps
    assert loss.item() == pytest.approx(3.75 / 2)
    assert meta["num_response_tokens"].item() == 4
    torch.testing.assert_close(logps.grad, torch.tensor([[-0.125, -0.125, 0.0], [0.0, -0.125, -0.125]]))


def test_packed_examples_do_not_attend_to_each_other(tiny):
    model, _ = tiny
    model = model.eval()
    examples = [[2, 10, 11, 12, 30, 3], [2, 13, 31, 3], [2, 14, 15, 32, 33, 3], [2, 16, 34]]
    masks = [[0, 0, 0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 1]]
    packed = pack_examples(examples, masks, max_length=12)
    assert packed.input_ids.shape == (2, 12)  # 6 + 4 fit in the first row, 6 + 3 in the second
    assert packed.position_ids[0].tolist() == [0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 0]
    assert packed.segment_ids[0].tolist() == [1] * 6 + [2] * 4 + [0, 0]
    with torch.no_grad():
        together = packed_logps(model, packed)
        for (r, start), ids in zip([(0, 0), (0, 6), (1, 0), (1, 6)], examples):
            alone = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
            expected = alone.gather(-1, torch.tensor(ids[1:]).unsqueeze(-1)).squeeze(-1)
            torch.testing.assert_close(together[r, start + 1:start + len(ids)], expected, rtol=1e-5, atol=1e-5)
        # The block mask matters: with a plain causal mask the second example would read the first.
        mask = packed_attention_mask(packed.segment_ids)
        assert mask[0, 0, 6, 5] < -1e30 and mask[0, 0, 6, 6] == 0 and mask[0, 0, 5, 0] == 0
    with pytest.raises(ValueError, match="more than max_length"):
        pack_examples([[1] * 13], [[1] * 13], max_length=12)


def test_dpo_loss_hand_worked_for_each_loss_type():
    chosen, rejected = torch.tensor([-2.0]), torch.tensor([-5.0])
    ref_chosen, ref_rejected = torch.tensor([-3.0]), torch.tensor([-4.0])
    # delta = (-2 + 3) - (-5 + 4) = 2
    out = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta=0.1, loss_type="sigmoid")
    assert out.loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-0.2))))
    assert out.metrics["rewards/chosen"] == pytest.approx(0.1) and out.metrics["rewards/rejected"] == pytest.approx(-0.1)
    assert out.metrics["rewards/margins"] == pytest.approx(0.2) and out.metrics["rewards/accuracies"] == 1.0
    assert dpo_loss(chosen, rejected, ref_chosen, ref_rejected, 0.1, "hinge").loss.item() == pytest.approx(0.8)
    ipo = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, 0.1, "ipo", torch.tensor([2]), torch.tensor([4]))
    assert ipo.loss.item() == pytest.approx((1 / 2 - (-1) / 4 - 5) ** 2)


def test_rejection_filter_keeps_what_reaches_the_threshold_and_rejects_unscorable():
    kept = rejection_filter(torch.tensor([1.0, 0.0, float("nan"), 2.0]), threshold=1.0)
    assert kept.tolist() == [1.0, 0.0, 0.0, 1.0]


def test_reverse_kl_token_advantage_is_the_teacher_minus_student_logp():
    student = torch.tensor([[-1.0, -2.0]])
    teacher = torch.tensor([[-0.5, -3.0]])
    assert reverse_kl_token_advantages(student, teacher, torch.tensor([[1, 0]])).tolist() == [[0.5, 0.0]]


# ---------------------------------------------------------------------------------------
# Configs: refused at construction, naming the field
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("algo,field,value,words", [
    ("dpo", "beta", 0.0, "reference"),
    ("dpo", "loss_type", "robust", "loss_type"),
    ("dpo", "per_device_train_batch_size", 3, "even"),
    ("sft", "beta", 0.1, "beta"),
    ("distill", "beta", 1.5, r"\[0.0, 1.0\]"),
    ("rejection", "beta", 0.1, "beta"),
    ("sft", "async_generation", True, "reads its rows from the dataset"),
    ("dpo", "dynamic_sampling", True, "reads its rows from the dataset"),
    ("distill", "num_processes", 2, "one process"),
])
def test_bad_configs_are_refused_naming_the_field(algo, field, value, words):
    with pytest.raises(ValueError, match=field) as error:
        make_config(algo, **{**COMMON, field: value})
    assert __import__("re").search(words, str(error.value))


def test_configs_keep_trl_defaults():
    assert make_config("dpo").beta == 0.1 and make_config("dpo").loss_type == "sigmoid"
    assert make_config("distill").beta == 1.0  # TRL 1.16's DistillationConfig: reverse KL
    assert make_config("sft").learning_rate == 2e-5 and make_config("sft").max_length == 1024


# ---------------------------------------------------------------------------------------
# The trainer end to end
# ---------------------------------------------------------------------------------------
def _train(tmp_path, tiny, algo, dataset, reward_funcs=None, **kwargs):
    model, tokenizer = _fresh(tiny)
    overrides = {k: v for k, v in kwargs.items() if k not in ("teacher_model",)}
    config = make_config(algo, output_dir=str(tmp_path / algo), **{**COMMON, **overrides})
    extra = {"teacher_model": kwargs["teacher_model"]} if "teacher_model" in kwargs else {}
    trainer = Trainer(config, reward_funcs, dataset, model, tokenizer, progress=False, **extra)
    return trainer, trainer.train()


def test_sft_trains_on_demonstrations_and_lowers_their_loss(tmp_path, tiny):
    trainer, rows = _train(tmp_path, tiny, "sft", sft_rows(8), max_steps=6, per_device_train_batch_size=8)
    assert len(rows) == 6 and all(math.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]  # the same 8 demonstrations every step
    assert rows[0]["sft/truncated_rows"] == 0 and (tmp_path / "sft" / "final").is_dir()


def test_dpo_trains_and_logs_trls_reward_metrics(tmp_path, tiny):
    trainer, rows = _train(tmp_path, tiny, "dpo", pair_rows(), learning_rate=1e-3)
    for name in ("rewards/chosen", "rewards/rejected", "rewards/margins", "rewards/accuracies", "logps/chosen"):
        assert name in rows[-1]
    assert rows[0]["rewards/margins"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at the first step
    assert rows[-1]["rewards/margins"] > 0  # one step later the chosen answers gained on the rejected


def test_rejection_sampling_logs_rounds_and_kept_fraction(tmp_path, tiny):
    trainer, rows = _train(tmp_path, tiny, "rejection", get_task("arithmetic", n=16, seed=0), CORRECT,
                           num_generations=4, max_steps=3)
    assert [r["rejection/round"] for r in rows] == [1, 2, 3]
    for r in rows:
        assert r["rejection/kept_fraction"] == pytest.approx(r["rejection/kept"] / 4)


def test_distillation_from_a_copy_has_zero_divergence_at_the_start(tmp_path, tiny):
    teacher = copy.deepcopy(tiny[0])
    trainer, rows = _train(tmp_path, tiny, "distill", get_task("arithmetic", n=16, seed=0), None,
                           teacher_model=teacher, max_steps=2)
    assert rows[0]["distill/divergence"] == pytest.approx(0.0, abs=1e-6)
    assert rows[1]["distill/divergence"] > 0  # the student moved (lr 1e-3) after its first step


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_distillation_runs_with_forward_kl_and_jsd(tmp_path, tiny, beta):
    teacher = copy.deepcopy(tiny[0])
    trainer, rows = _train(tmp_path, tiny, "distill", get_task("arithmetic", n=16, seed=0), CORRECT,
                           teacher_model=teacher, beta=beta, max_steps=1)
    assert math.isfinite(rows[0]["loss"])


def test_cli_trains_sft_from_the_tasks_answers(tmp_path):
    result = subprocess.run([sys.executable, "-m", "course_lib", "train", "--algo", "sft", "--max-steps", "1",
                             "--train-rows", "16", "--output-dir", str(tmp_path / "cli"),
                             "--set", "per_device_train_batch_size=4"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert '"algo": "sft"' in result.stdout


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------
def test_a_pair_whose_chosen_equals_rejected_is_refused(tmp_path, tiny):
    rows = pair_rows(8).to_list()
    rows[3]["rejected"] = rows[3]["chosen"]
    with pytest.raises(ValueError, match="row 3: chosen and rejected are the same"):
        _train(tmp_path, tiny, "dpo", Dataset.from_list(rows))


@pytest.mark.parametrize("algo", ["sft", "dpo"])
def test_empty_completions_are_refused(tmp_path, tiny, algo):
    rows = (sft_rows(8) if algo == "sft" else pair_rows(8)).to_list()
    rows[2]["completion" if algo == "sft" else "rejected"] = "  "
    with pytest.raises(ValueError, match="row 2: .*empty"):
        _train(tmp_path, tiny, algo, Dataset.from_list(rows))


def test_sft_rows_longer_than_the_context_are_cut_and_counted_or_refused(tmp_path, tiny):
    rows = sft_rows(8).to_list()
    rows[0]["completion"] = "1" * 200
    dataset = Dataset.from_list(rows)
    # max_length 40: the prompts are ~30 tokens, so the 200-token completion is cut
    trainer, history = _train(tmp_path, tiny, "sft", dataset, max_length=40, max_steps=1, per_device_train_batch_size=8)
    assert history[0]["sft/truncated_rows"] == 1
    with pytest.raises(ValueError, match="more than max_length=40"):
        _train(tmp_path / "refused", tiny, "sft", dataset, max_length=40, truncation_mode="error", max_steps=1,
               per_device_train_batch_size=8)


def test_a_teacher_of_another_vocabulary_is_refused_saying_why(tmp_path, tiny):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = copy.deepcopy(tiny[0].config)
    config.vocab_size = 120
    other = LlamaForCausalLM(LlamaConfig(**config.to_dict()))
    with pytest.raises(ValueError, match="predicts over 120 tokens and the student over 100"):
        _train(tmp_path, tiny, "distill", get_task("arithmetic", n=16, seed=0), None, teacher_model=other)


def test_a_teacher_with_another_tokenizer_is_refused_saying_why(tiny):
    model, tokenizer = tiny
    other = copy.deepcopy(tokenizer)
    other.add_tokens(["<extra>"])
    with pytest.raises(ValueError, match="tokenizer differs .* same id must mean the same token"):
        check_teacher(tokenizer, other, model, model)


def test_a_rejection_round_that_keeps_nothing_is_logged_with_a_clear_message(tmp_path, tiny):
    never = lambda prompts, completions, **kw: [0.0] * len(completions)  # noqa: E731
    with pytest.warns(EmptyRoundWarning, match="no sample of 4 reached reward_threshold=1.0"):
        trainer, rows = _train(tmp_path, tiny, "rejection", get_task("arithmetic", n=16, seed=0), [never],
                               num_generations=4, max_steps=1)
    assert rows[0]["rejection/kept_fraction"] == 0.0 and rows[0]["loss"] == 0.0 and rows[0]["rejection/round"] == 1


def test_dpo_without_a_reference_is_refused():
    with pytest.raises(ValueError, match="beta.*reference"):
        make_config("dpo", beta=0.0)


def test_preference_pairs_from_the_models_own_samples(tiny):
    model, tokenizer = _fresh(tiny)
    dataset = get_task("arithmetic", n=8, seed=0)
    rows, stats = preference_pairs(model, tokenizer, dataset, CORRECT, k=4, max_tokens=6)
    assert stats["prompts"] == 8 and stats["pairs"] == len(rows) and stats["tokens_sampled"] > 0
    for row in rows:
        from course_lib.rewards.answers import is_correct

        assert is_correct(row["chosen"], row["answer"]) and not is_correct(row["rejected"], row["answer"])


@pytest.mark.parametrize("algo,words", [("distill", "DistillationTrainer"), ("rejection", "no rejection-sampling trainer")])
def test_export_trl_says_why_it_does_not_hand_over_the_run(tmp_path, algo, words):
    from course_lib.cli.export_trl import export_run

    config = make_config(algo, **COMMON, output_dir=str(tmp_path / "run"))
    with pytest.raises(ValueError, match=words):
        export_run(config, None, sft_rows(4), tmp_path / "export")


@pytest.mark.parametrize("algo", ["sft", "dpo", "rejection"])
def test_resume_reproduces_the_uninterrupted_run(tmp_path, tiny, algo):
    from course_lib.run.history import WALL_CLOCK_KEYS

    data = {"sft": sft_rows(16), "dpo": pair_rows(16), "rejection": get_task("arithmetic", n=16, seed=0)}[algo]
    rewards = CORRECT if algo == "rejection" else None
    settings = dict(max_steps=4, save_steps=2, **({"num_generations": 4} if algo == "rejection" else {}))
    full, full_history = _train(tmp_path / "full", tiny, algo, data, rewards, **settings)
    model, tokenizer = _fresh(tiny)
    config = make_config(algo, output_dir=str(tmp_path / "resumed"), **{**COMMON, **settings})
    resumed = Trainer(config, rewards, data, model, tokenizer, progress=False)
    resumed_history = resumed.train(resume_from=tmp_path / "full" / algo / "checkpoint-2")

    def comparable(row):
        return {k: v for k, v in row.items() if k not in WALL_CLOCK_KEYS and k not in ("tokens/s", "eps")}

    assert [comparable(r) for r in resumed_history[2:]] == [comparable(r) for r in full_history[2:]]
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
