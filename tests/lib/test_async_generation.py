"""Asynchronous generation (course_lib.run.async_rollouts) on the tiny model: a worker process samples ahead."""

import os
import signal
from contextlib import contextmanager

import pytest
import torch

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.run.async_rollouts import GenerationWorkerError, sampled_version
from course_lib.trainer import Trainer

CORRECT = get_reward_functions(["correctness_first_number_reward", "proximity_reward"])


def _trainer(tmp_path, algo="grpo", **overrides):
    settings = dict(model_name_or_path="tiny", output_dir=str(tmp_path), max_steps=3, learning_rate=1e-3,
                    per_device_train_batch_size=4, gradient_accumulation_steps=1, num_generations=4,
                    max_completion_length=6, logging_steps=1, save_steps=0, seed=3)
    settings.update(overrides)
    model, tokenizer = load_policy("tiny")
    return Trainer(make_config(algo, **settings), CORRECT, get_task("arithmetic", n=64, seed=0), model, tokenizer,
                   progress=False)


def _recording(trainer):
    """Record the completion ids of every generation batch the trainer scores."""
    seen, score = [], trainer._score

    def recorded(generated):
        seen.append(generated.rollout.completion_ids.clone())
        return score(generated)

    trainer._score = recorded
    return seen


def _recording_scored(trainer):
    """Record, for every generation batch, the worker's log-probs, the completion mask and the scored batch."""
    seen, score = [], trainer._score

    def recorded(generated):
        batch = score(generated)
        seen.append((generated.rollout.sampling_logps.clone(), generated.rollout.completion_mask, batch))
        return batch

    trainer._score = recorded
    return seen


@contextmanager
def _deadline(seconds):
    """Fail instead of hanging: SIGALRM raises in the main thread."""
    def expired(signum, frame):
        raise TimeoutError(f"no result after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_sampled_version_keeps_the_bound_and_the_sync_steps():
    config = make_config("grpo", model_name_or_path="tiny", per_device_train_batch_size=4, num_generations=4,
                         steps_per_generation=2, gradient_accumulation_steps=1, max_staleness=3, weight_sync_steps=2)
    # two optimizer steps per cycle: cycle c is taken at step 2c and sampled with the weights of the
    # oldest even step no more than 3 behind
    assert [sampled_version(c, config) for c in range(5)] == [(0, 0), (2, 0), (4, 2), (6, 4), (8, 6)]
    assert sampled_version(1, config, start_step=1) == (2, 1)  # after a resume: never older than the start
    with pytest.raises(ValueError, match="weight_sync_steps"):
        make_config("grpo", model_name_or_path="tiny", max_staleness=0, weight_sync_steps=2)
    with pytest.raises(ValueError, match="async_generation.*dynamic_sampling"):
        make_config("grpo", model_name_or_path="tiny", async_generation=True, dynamic_sampling=True)
    with pytest.raises(ValueError, match="max_staleness"):
        make_config("grpo", model_name_or_path="tiny", max_staleness=-1)


@pytest.mark.parametrize("old_logps", ["sampler", "recompute"])
def test_staleness_zero_equals_the_synchronous_trainer(tmp_path, old_logps):
    # "recompute" switches the sampling correction on by default; the synchronous run gets it too, so that
    # both compute the same loss (the correction's weights are exactly 1 when nothing is stale). "sampler"
    # takes the worker's log-probs as the old ones: the ratio is 1 up to the rounding of cached decoding
    # against one full forward (measured below 2e-6 in log space), which Adam turns into parameter
    # differences of about 1e-2 x lr: lr 1e-4 keeps them under the 1e-5 tolerance (as the data-parallel tests)
    sync = _trainer(tmp_path / "sync", vllm_importance_sampling_correction=old_logps == "recompute", learning_rate=1e-4)
    sync_batches, sync_rows = _recording(sync), sync.train()
    run = _trainer(tmp_path / "async", async_generation=True, max_staleness=0, async_old_logps=old_logps,
                   learning_rate=1e-4)
    with _deadline(300):
        async_batches, async_rows = _recording(run), run.train()
    assert len(sync_batches) == len(async_batches) == 3
    for a, b in zip(sync_batches, async_batches):
        assert torch.equal(a, b)  # the same completions, sampled in the worker process
    for a, b in zip(sync_rows, async_rows):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-6)
        assert b["sample/staleness_max"] == 0.0
        if old_logps == "recompute":
            assert b["sampling/importance_sampling_ratio/min"] == pytest.approx(1.0, abs=1e-4)
        else:
            assert not any(key.startswith("sampling/") for key in b)
    for (name, p), q in zip(sync.model.named_parameters(), run.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=0, msg=name)
    assert run.pipeline is None  # the worker is stopped when train() returns


def _counting_forwards(trainer):
    """Count the trainer's forward passes before learning (old or reference log-probs)."""
    calls, forward = [], trainer._forward_in_chunks

    def counted(*args, **kwargs):
        calls.append(1)
        return forward(*args, **kwargs)

    trainer._forward_in_chunks = counted
    return calls


def test_staleness_one_takes_the_samplers_log_probs_as_the_old_ones(tmp_path):
    run = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=4)
    forwards, batches = _counting_forwards(run), _recording_scored(run)
    with _deadline(300):
        rows = run.train()
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["sample/staleness_max"] for r in rows] == [0.0, 1.0, 1.0, 1.0]
    assert forwards == []  # no forward pass before learning: the worker's log-probs are the old ones
    for sampling_logps, mask, batch in batches:
        assert batch.sampling_ratio is None
        torch.testing.assert_close(batch.old_logps, sampling_logps.float() * mask, rtol=0, atol=0)
    assert all(torch.isfinite(p).all() for p in run.model.parameters())


@pytest.mark.parametrize("algo", ["rloo", "ppo"])
def test_rloo_and_ppo_learn_from_the_samplers_log_probs(tmp_path, algo):
    """RLOO's KL-shaped reward and PPO's ratio read the worker's log-probs; PPO still runs its forward
    pass before learning, for the values only."""
    run = _trainer(tmp_path, algo, async_generation=True, max_staleness=1, max_steps=3, beta=0.05,
                   num_iterations=1)  # one optimizer step per batch (PPO's default is 4 epochs)
    forwards, batches = _counting_forwards(run), _recording_scored(run)
    with _deadline(300):
        rows = run.train()
    assert [r["sample/staleness_max"] for r in rows] == [0.0, 1.0, 1.0]
    for sampling_logps, mask, batch in batches:
        torch.testing.assert_close(batch.old_logps, sampling_logps.float() * mask, rtol=0, atol=0)
        assert (batch.old_values is not None) == (algo == "ppo")
    # the reference model's log-probs every batch (beta > 0), plus PPO's values
    assert len(forwards) == len(batches) * (2 if algo == "ppo" else 1)
    assert all(torch.isfinite(p).all() for p in run.model.parameters())


def test_staleness_one_recomputes_and_corrects_stale_samples(tmp_path):
    run = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=4, async_old_logps="recompute")
    forwards = _counting_forwards(run)
    with _deadline(300):
        rows = run.train()
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    staleness = [r["sample/staleness_max"] for r in rows]
    assert staleness == [0.0, 1.0, 1.0, 1.0]  # the first batch comes from the initial weights, taken at step 0
    assert len(forwards) == 4  # one forward pass per batch: the trainer's own log-probs
    for row in rows[1:]:  # a stale batch: the trainer's log-probs differ from the sampler's
        assert row["sampling/sampling_logp_difference/max"] > 0
        assert "sampling/importance_sampling_ratio/mean" in row
    assert all(torch.isfinite(p).all() for p in run.model.parameters())


def test_the_correction_is_refused_where_it_cannot_act():
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction.*async_old_logps='sampler'"):
        make_config("grpo", model_name_or_path="tiny", async_generation=True, vllm_importance_sampling_correction=True)
    config = make_config("grpo", model_name_or_path="tiny", async_generation=True, async_old_logps="recompute")
    assert config.effective_vllm_importance_sampling_correction
    assert not make_config("grpo", model_name_or_path="tiny", async_generation=True).effective_vllm_importance_sampling_correction


def test_a_killed_worker_stops_the_run_with_a_clear_error(tmp_path):
    run = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=6)
    killed = []

    def kill_worker(row):
        if row["step"] == 1:
            killed.append(run.pipeline.process)
            os.kill(run.pipeline.process.pid, signal.SIGKILL)

    run.on_step = kill_worker
    with _deadline(300), pytest.raises(GenerationWorkerError, match="generation worker .* exited with code -9"):
        run.train()
    assert not killed[0].is_alive()


def test_ctrl_c_stops_both_processes_and_the_run_resumes(tmp_path):
    run = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=4)
    worker = []

    def interrupt(row):
        if row["step"] == 2:
            worker.append(run.pipeline.process)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaches the trainer (the worker ignores it)

    run.on_step = interrupt
    with _deadline(300):
        run.train()
    assert run.interrupted and run.step == 2
    assert not worker[0].is_alive()
    assert (tmp_path / "checkpoint-2").is_dir()
    resumed = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=4)
    with _deadline(300):
        rows = resumed.train(resume_from="latest")
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and resumed.step == 4
    # the batch in flight at the interruption is regenerated from the resumed weights: taken fresh
    assert rows[2]["sample/staleness_max"] == 0.0 and rows[3]["sample/staleness_max"] == 1.0


def test_an_asynchronous_run_may_resume_synchronously(tmp_path):
    """A worker that keeps failing need not end the run: the checkpoint resumes without it."""
    run = _trainer(tmp_path, async_generation=True, max_staleness=1, max_steps=2, save_steps=2,
                   lr_scheduler_type="constant")
    with _deadline(300):
        run.train()
    resumed = _trainer(tmp_path, max_steps=3, lr_scheduler_type="constant")
    rows = resumed.train(resume_from="latest")
    assert [r["step"] for r in rows] == [1, 2, 3] and "sample/staleness_max" not in rows[2]


def test_a_batch_crosses_the_process_boundary_unchanged():
    """Batches travel as numpy arrays (bfloat16, which numpy lacks, as a tensor) and come back equal."""
    import pickle

    from course_lib.rollout.base import RolloutBatch
    from course_lib.run.async_rollouts import _as_tensors, _by_value

    for logps_dtype in (torch.float32, torch.bfloat16):
        batch = RolloutBatch(prompt_ids=torch.tensor([[0, 5, 6]]), prompt_mask=torch.tensor([[0, 1, 1]]),
                             completion_ids=torch.tensor([[7, 2]]), completion_mask=torch.tensor([[1, 1]]),
                             is_eos=torch.tensor([True]), texts=["a"],
                             sampling_logps=torch.tensor([[-0.5, -1.25]], dtype=logps_dtype))
        back = _as_tensors(pickle.loads(pickle.dumps(_by_value(batch))))
        for name in ("prompt_ids", "prompt_mask", "completion_ids", "completion_mask", "is_eos", "sampling_logps"):
            got, want = getattr(back, name), getattr(batch, name)
            assert got.dtype == want.dtype and torch.equal(got, want), name
        assert back.texts == ["a"]


_ORPHANED_TRAINER = """
import sys

from course_lib.algos import make_config
from course_lib.data import get_task
from course_lib.models import load_policy
from course_lib.rewards import get_reward_functions
from course_lib.trainer import Trainer


def main():
    model, tokenizer = load_policy("tiny")
    config = make_config("grpo", model_name_or_path="tiny", output_dir=sys.argv[1], max_steps=100_000,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=6, save_steps=0,
                         logging_steps=1, async_generation=True, max_staleness=1)
    trainer = Trainer(config, get_reward_functions(["proximity_reward"]), get_task("arithmetic", n=64), model,
                      tokenizer, progress=False)
    trainer.on_step = lambda row: print("WORKER", trainer.pipeline.process.pid, flush=True) if row["step"] == 1 else None
    trainer.train()


if __name__ == "__main__":
    main()
"""


def test_the_worker_exits_when_the_trainers_process_is_killed(tmp_path):
    """SIGKILL leaves the trainer no chance to stop its worker: the worker notices that the trainer's
    process is gone (its parent, the fork server, exits with the trainer) and ends within seconds."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    script = tmp_path / "trainer.py"
    script.write_text(_ORPHANED_TRAINER)
    root = Path(__file__).resolve().parents[2]
    trainer = subprocess.Popen([sys.executable, str(script), str(tmp_path / "run")], stdout=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"})
    try:
        with _deadline(300):
            line = trainer.stdout.readline()
        assert line.startswith("WORKER "), line
        worker = int(line.split()[1])
        os.kill(trainer.pid, signal.SIGKILL)
        trainer.wait(timeout=30)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _exists(worker):
            time.sleep(0.2)
        assert not _exists(worker), f"the worker (pid {worker}) outlived its trainer by 20 s"
    finally:
        if trainer.poll() is None:
            trainer.kill()


def _exists(pid: int) -> bool:
    """The process runs (a zombie, ended and not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_worker_forks_from_a_server_on_linux_and_is_spawned_elsewhere(monkeypatch):
    """A fork server imports torch and the library once per trainer process; macOS and Windows spawn."""
    from course_lib.run import async_rollouts

    model, _ = load_policy("tiny")
    monkeypatch.setattr("sys.platform", "linux")
    assert async_rollouts._worker_context(model).get_start_method() == "forkserver"
    for platform in ("darwin", "win32"):
        monkeypatch.setattr("sys.platform", platform)
        assert async_rollouts._worker_context(model).get_start_method() == "spawn"


def test_trainer_gone_reads_the_parent_and_the_trainers_pid():
    import subprocess
    import sys

    from course_lib.run.async_rollouts import _trainer_gone
    from course_lib.run.folder import _owner_record

    me = _owner_record()
    assert not _trainer_gone(me, os.getppid())
    assert _trainer_gone(me, os.getppid() + 1)  # re-parented: the parent it started under is gone
    assert _trainer_gone({**me, "start": "0"}, os.getppid())  # the trainer's pid now names another process
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    assert _trainer_gone({**me, "pid": ended.pid}, os.getppid())  # the trainer's pid no longer exists
