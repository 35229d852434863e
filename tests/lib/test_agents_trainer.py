"""Tool runs through the trainer: GRPO, RLOO and PPO on multi-turn rollouts of the tiny model.

The tiny model never writes a tool call by itself, so its engine is wrapped: each rollout's
first turn is a scripted call, its second turn a scripted answer; everything after that (the
environment, the tool results, rewards, masks, log-probs, the loss) is the real trainer.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest
import torch
from datasets import Dataset

from course_lib.algos import make_config
from course_lib.algos.ppo import model_token_advantages, ppo_advantages
from course_lib.models import eval_mode, load_policy, resolve_model_path
from course_lib.rollout import vllm_available
from course_lib.trainer import Trainer


class Counter:
    """Count up to a target with one tool; rewarded 1 when the counter equals the target."""

    def reset(self, target, **_):
        self.target, self.value = int(target), 0
        return None

    def increment(self, step: int) -> int:
        """Add to the counter.

        Args:
            step: how much to add
        """
        self.value += step
        return self.value

    def get_reward(self) -> float:
        return float(self.value == self.target)


class ScriptedCalls:
    """Wraps the real engine: turn 0 is a scripted call ``increment(step)`` with the step drawn
    from the row's seed (so rollouts depend on the seeds, as sampled ones do); later turns are
    the tiny model's own sampled answer (at most 6 tokens)."""

    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer = engine, tokenizer
        self.record_logps, self.eos_ids, self.context_limit = True, engine.eos_ids, 512

    def sync_weights(self, model):
        self.engine.sync_weights(model)

    def generate_from_ids(self, prompt_ids, sampling, seeds=None):
        if "<|im_start|>tool" in self.tokenizer.decode(prompt_ids[0]):  # rows move through turns together here
            return self.engine.generate_from_ids(prompt_ids, dataclasses.replace(sampling, max_tokens=6), seeds)
        outs = []
        for r in range(len(prompt_ids)):
            step = 1 + (seeds[r] if seeds is not None else r) % 2  # step 2 reaches the target 2
            reply = f'<tool_call>{{"name": "increment", "arguments": {{"step": {step}}}}}</tool_call>'
            outs.append(self.tokenizer(reply, add_special_tokens=False)["input_ids"] + self.eos_ids)
        return outs, [[-1.0] * len(o) for o in outs]


def _dataset(rows=8):
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": "Go"}]] * rows, "target": [2] * rows})


def _trainer(tmp_path, algo="grpo", **overrides):
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1, learning_rate=1e-3,
                    per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=4,
                    max_completion_length=160, logging_steps=1, save_steps=0, seed=3, beta=0.04)
    settings.update(overrides)
    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512  # RoPE: room for the tool list in the prompt
    trainer = Trainer(make_config(algo, **settings), None, _dataset(), model, tokenizer, progress=False,
                      environment_factory=Counter)
    trainer.engine = ScriptedCalls(trainer.engine, tokenizer)
    return trainer


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_tool_runs_train_with_masked_tool_tokens(tmp_path, algo):
    trainer = _trainer(tmp_path, algo)
    batch = trainer._score(trainer._generate())
    attention, loss_mask = batch.attention_mask, batch.completion_mask
    assert attention is not None and (loss_mask <= attention).all()
    holes = (attention == 1) & (loss_mask == 0)
    assert holes.sum(1).min() > 0  # every trajectory holds a tool result
    tool_text = trainer.tokenizer.decode(batch.completion_ids[0][holes[0]])
    assert tool_text.startswith("\n<|im_start|>tool\n") and tool_text.endswith("<|im_start|>assistant\n")
    assert batch.metrics["tools/call_frequency"] == 1.0 and batch.metrics["tools/failure_frequency"] == 0.0
    counters = trainer.tool_run.environments.pool[None][:len(batch.rows)]  # one per rollout, after its call
    assert batch.metrics["rewards/Counter/mean"] == pytest.approx(sum(c.value == 2 for c in counters) / len(counters))
    if algo == "ppo":  # advantages and returns live on model tokens only
        assert (batch.advantages[loss_mask == 0] == 0).all() and (batch.returns[loss_mask == 0] == 0).all()
    rows = trainer.train()
    assert math.isfinite(rows[-1]["loss"]) and rows[-1]["tools/call_frequency"] == 1.0
    assert "rewards/Counter/mean" in rows[-1]


def test_tool_run_refusals(tmp_path):
    model, tokenizer = load_policy("tiny")
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4)
    text_rows = Dataset.from_dict({"prompt": ["Go"] * 8, "target": [2] * 8})
    with pytest.raises(ValueError, match="row 0: a run with tools needs conversational prompts"):
        Trainer(config, None, text_rows, model, tokenizer, environment_factory=Counter)

    class NoReward:
        def reset(self, **_):
            return None
    with pytest.raises(ValueError, match="no reward source"):
        Trainer(config, None, _dataset(), model, tokenizer, environment_factory=NoReward)
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": "Go"}]] * 8, "target": [2] * 8,
                              "environment": ["counter"] * 7 + ["chess"]})
    with pytest.raises(ValueError, match=r"'environment' column names \['chess'\]"):
        Trainer(config, None, rows, model, tokenizer, environment_factory={"counter": Counter})
    with pytest.raises(ValueError, match="no 'environment' column"):
        Trainer(config, None, _dataset(), model, tokenizer, environment_factory={"counter": Counter})
    with pytest.raises(ValueError, match="dynamic_sampling=True: refilling groups does not carry tool trajectories"):
        Trainer(make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                            per_device_train_batch_size=4, num_generations=4, dynamic_sampling=True),
                None, _dataset(), model, tokenizer, environment_factory=Counter)
    with pytest.raises(ValueError, match="max_tool_calling_iterations"):
        make_config("grpo", max_tool_calling_iterations=-1)
    with pytest.raises(ValueError, match="tool_timeout"):
        make_config("grpo", tool_timeout=0)


def test_ppo_gae_skips_tool_tokens():
    """With the same holes in every row, GAE over model tokens equals GAE on the tensors with the
    tool columns deleted (computed by the plain single-turn function)."""
    config = make_config("ppo", beta=0.05, gamma=0.9, lam=0.8)
    gen = torch.Generator().manual_seed(0)
    batch, width = 4, 9
    logps, ref = -torch.rand(batch, width, generator=gen), -torch.rand(batch, width, generator=gen)
    values, scores = torch.randn(batch, width, generator=gen), torch.randn(batch, generator=gen)
    mask = torch.ones(batch, width)
    mask[:, 3:5] = 0  # a tool result between two turns
    mask[:, 8] = 0    # padding
    is_eos = torch.ones(batch, dtype=torch.bool)
    adv, ret, _ = model_token_advantages(scores, logps, ref, values, mask, is_eos, config)
    keep = [0, 1, 2, 5, 6, 7, 8]
    plain_adv, plain_ret, _ = ppo_advantages(scores, logps[:, keep], ref[:, keep], values[:, keep], mask[:, keep],
                                             is_eos, config)
    torch.testing.assert_close(adv[:, keep], plain_adv)
    torch.testing.assert_close(ret[:, keep], plain_ret)
    assert (adv[:, 3:5] == 0).all() and (ret[:, 3:5] == 0).all()
    no_holes = torch.ones(batch, width)
    torch.testing.assert_close(model_token_advantages(scores, logps, ref, values, no_holes, is_eos, config)[0],
                               ppo_advantages(scores, logps, ref, values, no_holes, is_eos, config)[0])


def test_export_trl_refuses_tool_runs_and_says_why(tmp_path):
    from course_lib.cli.export_trl import export_run

    config = make_config("grpo", max_tool_calling_iterations=3)
    with pytest.raises(ValueError, match=r"(?s)tools and environments are Python objects.*GRPOTrainer\(\.\.\., tools="):
        export_run(config, ["correctness_reward"], _dataset(), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_export_trl_refuses_tools_given_without_an_iteration_cap(tmp_path):
    # TRL's default cap is None, so the config alone does not mark a tool run: the tools, the
    # environment factory or an 'environment' column do.
    from datasets import Dataset
    from course_lib.cli.export_trl import export_run

    config = make_config("grpo")
    assert config.max_tool_calling_iterations is None
    def add(a: int, b: int) -> int:
        """Add two numbers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    for extra in ({"tools": [add]}, {"environment_factory": Counter}):
        with pytest.raises(ValueError, match=r"(?s)mark a run with tools.*GRPOTrainer\(\.\.\., tools="):
            export_run(config, ["correctness_reward"], _dataset(), tmp_path / "out", **extra)
    rows = Dataset.from_list([{**row, "environment": "counter"} for row in _dataset()])
    with pytest.raises(ValueError, match=r"the dataset's 'environment' column mark a run with tools"):
        export_run(config, ["correctness_reward"], rows, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("algo", ["grpo", "rloo", "ppo"])
def test_tool_run_resumes_exactly(tmp_path, algo):
    """A checkpoint taken with a multi-turn generation batch in flight resumes to the same run."""
    settings = dict(max_steps=4, save_steps=2, steps_per_generation=2, num_iterations=2, temperature=1.5)
    if algo == "rloo":  # RLOO's ratio is per sequence: 1e-3 moves the scripted calls' summed log-prob by ~85 nats
        settings["learning_rate"] = 1e-5  # in one step, and exp(85) overflows float32 at the second iteration
    full = _trainer(tmp_path / "full", algo, **settings)
    full_history = full.train()
    assert full_history[-1]["tools/call_frequency"] == 1.0
    resumed = _trainer(tmp_path / "resumed", algo, **settings)
    resumed_history = resumed.train(resume_from=tmp_path / "full" / "checkpoint-2")
    def comparable(row):  # wall-clock quantities differ between any two runs
        return {k: v for k, v in row.items() if k not in ("tokens/s", "eps") and not k.startswith("timing/")}
    assert [comparable(r) for r in resumed_history[2:]] == [comparable(r) for r in full_history[2:]]
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)
    untrained, _ = load_policy("tiny")  # the comparison is not vacuous: the last two steps moved the weights
    assert any(not torch.equal(a, b) for a, b in zip(untrained.parameters(), full.model.parameters()))
    if algo == "ppo":  # the value head is part of what resumes
        full_values, resumed_values = full.value_head.state_dict(), resumed.value_head.state_dict()
        assert all(torch.equal(full_values[k], resumed_values[k]) for k in full_values)


def test_environments_chosen_by_column_log_their_own_reward(tmp_path):
    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512
    rows = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Go {i}"}] for i in range(8)],
                              "target": [2, 1] * 4, "environment": ["two", "one"] * 4})
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=8, num_generations=4, max_completion_length=160,
                         shuffle_dataset=False, seed=3)
    trainer = Trainer(config, None, rows, model, tokenizer, progress=False,
                      environment_factory={"two": Counter, "one": Counter})
    trainer.engine = ScriptedCalls(trainer.engine, tokenizer)
    batch = trainer._score(trainer._generate())
    names = [rows[r]["environment"] for r in batch.rows]
    pools = trainer.tool_run.environments.pool
    expected = {}
    for name in ("two", "one"):
        used = pools[name][:names.count(name)]
        assert len(used) == names.count(name) == 4
        expected[name] = sum(c.value == c.target for c in used) / len(used)
        assert batch.metrics[f"environments/{name}/reward"] == pytest.approx(expected[name])
    assert batch.metrics["rewards/Counter/mean"] == pytest.approx((expected["two"] + expected["one"]) / 2)


class LockedCounter(Counter):
    """An environment holding something that cannot be copied (a lock, like a socket or a process)."""

    def reset(self, target, **row):
        import threading

        self.lock = threading.Lock()
        return super().reset(target, **row)


def test_reward_reads_the_live_environments_not_copies(tmp_path):
    model, tokenizer = load_policy("tiny")
    model.config.max_position_embeddings = 512
    config = make_config("grpo", model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=1,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=160, seed=3)
    trainer = Trainer(config, None, _dataset(), model, tokenizer, progress=False, environment_factory=LockedCounter)
    trainer.engine = ScriptedCalls(trainer.engine, tokenizer)
    batch = trainer._score(trainer._generate())
    counters = trainer.tool_run.environments.pool[None][:4]
    assert batch.metrics["rewards/LockedCounter/mean"] == pytest.approx(sum(c.value == 2 for c in counters) / 4)


class ScriptedCallsWithLogps(ScriptedCalls):
    """``ScriptedCalls`` whose scripted turn carries the policy's own log-probs of its tokens (what a
    sampler that drew them would report) and whose context limit is the wrapped engine's, so the
    sampler-vs-trainer log-prob check covers whole trajectories and both engines render alike."""

    def __init__(self, engine, tokenizer, model):
        super().__init__(engine, tokenizer)
        self.model, self.context_limit = model, engine.context_limit

    def generate_from_ids(self, prompt_ids, sampling, seeds=None):
        outs, logps = super().generate_from_ids(prompt_ids, sampling, seeds)
        if "<|im_start|>tool" in self.tokenizer.decode(prompt_ids[0]):
            return outs, logps  # the wrapped engine's own turn and log-probs
        logps = []
        with torch.no_grad(), eval_mode(self.model):
            for prompt, out in zip(prompt_ids, outs):
                logits = self.model(torch.tensor([list(prompt) + out])).logits[0, len(prompt) - 1:-1].float()
                step = torch.log_softmax(logits / sampling.temperature, -1)
                logps.append(step.gather(1, torch.tensor(out)[:, None])[:, 0].tolist())
        return outs, logps


def _tiny_with_positions(folder, positions=256):
    """The tiny checkpoint with more positions (RoPE extends): vLLM reads the length from config.json, and
    128 cannot hold prompt, call, result and answer."""
    shutil.copytree(resolve_model_path("tiny"), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": positions}))
    return folder


def _engine_trainer(tmp_path, engine, model_path, **overrides):
    model, tokenizer = load_policy(str(model_path))
    settings = dict(model_name_or_path=str(model_path), output_dir=str(tmp_path / engine), engine=engine,
                    max_steps=2, learning_rate=1e-3, per_device_train_batch_size=4, gradient_accumulation_steps=1,
                    num_generations=4, max_completion_length=120, logging_steps=1, save_steps=0, seed=3,
                    temperature=1.0, vllm_importance_sampling_correction=True, vllm_kv_cache_gib=0.25)
    trainer = Trainer(make_config("grpo", **{**settings, **overrides}), None, _dataset(), model, tokenizer,
                      progress=False, environment_factory=Counter)
    trainer.engine = ScriptedCallsWithLogps(trainer.engine, tokenizer, model)
    return trainer


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.xdist_group("vllm_engine")
@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (optional engine)")
@pytest.mark.filterwarnings("ignore:vllm_importance_sampling_correction=True has almost no effect")
def test_environment_run_on_the_vllm_engine_reads_the_tool_results(tmp_path):
    """GRPO with ``environment_factory`` sampling on vLLM: tool results are masked out of the loss, they
    reach the model (vLLM's log-probs of the answer written after them equal the trainer's forward pass
    over the whole trajectory), and up to the end of the tool result the trajectories, masks and rewards
    are those of the HF engine on the same config (after it, each engine samples its own answer)."""
    model_path = _tiny_with_positions(tmp_path / "tiny256")
    runs = {}
    for name in ("hf", "vllm"):
        trainer = _engine_trainer(tmp_path, name, model_path)
        generated = trainer._generate()
        batch = trainer._score(generated)
        loss_mask, attention = batch.completion_mask, batch.attention_mask
        holes = (attention == 1) & (loss_mask == 0)
        counters = trainer.tool_run.environments.pool[None][:len(batch.rows)]
        prefixes = []
        for row, counter in enumerate(counters):
            positions = holes[row].nonzero()[:, 0]
            assert len(positions) > 0, f"{name}: row {row} holds no tool result"
            result_text = trainer.tokenizer.decode(batch.completion_ids[row, positions])
            assert result_text == f"\n<|im_start|>tool\n{counter.value}<|im_end|>\n<|im_start|>assistant\n"
            tool_turns = [m for m in generated.tools.completions[row] if m["role"] == "tool"]
            assert [m["content"] for m in tool_turns] == [str(counter.value)]
            end = int(positions[-1]) + 1
            answer = loss_mask[row, end:].bool()
            assert answer.any(), f"{name}: the engine wrote nothing after the tool result"
            gap = (batch.sampling_logps[row, end:] - batch.old_logps[row, end:])[answer].abs().max().item()
            # measured: ~6e-6; with the digit of the tool result swapped in the trainer's pass, 0.30 to 0.58
            assert gap < 1e-3, f"{name}: row {row}'s answer log-probs differ from the trainer's by {gap}"
            prefixes.append((batch.completion_ids[row, :end].tolist(), loss_mask[row, :end].tolist()))
        assert batch.metrics["tools/call_frequency"] == 1.0 and batch.metrics["tools/failure_frequency"] == 0.0
        rows = trainer.train()
        for logged in rows:  # after each update the engine samples with the new weights
            assert logged["sampling/sampling_logp_difference/max"] < 1e-3, (name, logged)
            assert logged["tools/call_frequency"] == 1.0
        assert math.isfinite(rows[-1]["loss"])
        runs[name] = {"prefixes": prefixes, "prompt_ids": batch.prompt_ids[batch.prompt_mask.bool()].tolist(),
                      "rewards": batch.metrics["rewards/Counter/mean"]}
        if name == "vllm":
            trainer.engine.engine.shutdown()
    assert runs["vllm"] == runs["hf"]
