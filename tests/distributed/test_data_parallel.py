"""Two processes (gloo, CPU) train exactly as one process with the same global batch.

Each case is a run of ``run_training.py`` done twice: once alone with
``per_device_train_batch_size=8``, once on two processes (``torch.distributed.run``, the
launcher behind ``accelerate launch``) with 4 per process. Rows are sharded across the
processes as ``course_lib.schedule`` says, every completion has its own seed, advantages see
the gathered batch, and DDP averages the gradients: the completions, the logged losses and
the parameters after 3 optimizer steps must agree.

Starting Python and importing torch, transformers and accelerate costs far more CPU time
than 3 steps of the tiny model, so the cases' one-process runs share one launch and their
two-process runs another (the same runs in the same order in both); each run still builds
its own model, config and trainer. The two-process launch ends by the ordinary interpreter exit
(not `exit_worker`), which the teardown check reads. The resumed run and the launch that must
fail each get a launch of their own.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# float32 on one CPU: the two runs reduce sums in different orders; 3 Adam steps at lr 1e-4
# keep parameter differences around 1e-6 (measured), the losses agree to ~1e-8.
PARAMETER_TOL = 1e-5
LOSS_TOL = 1e-6

CASES = {
    "grpo-dapo": ("grpo", ["loss_type=dapo", "beta=0.04"]),
    "grpo-grpo": ("grpo", ["loss_type=grpo"]),
    "rloo": ("rloo", []),
    "ppo": ("ppo", []),
}
TOOL_ALGOS = ("grpo", "rloo", "ppo")
TOOL_OVERRIDES = ["max_completion_length=160", "beta=0.04"]
RESUME_COMMON = ["steps_per_generation=2", "lr_scheduler_type=constant", "save_steps=1"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _job(tmp_path: Path, name: str, algo: str, overrides: list[str], processes: int, tools: bool = False) -> dict:
    """One run of a launch: where it saves, its algorithm and its config overrides."""
    per_device = 8 // processes
    return {"name": name, "out": str(tmp_path / f"{name}-{processes}.pt"), "algo": algo, "tools": tools,
            "overrides": [f"per_device_train_batch_size={per_device}", f"num_processes={processes}",
                          f"output_dir={tmp_path / f'{name}-{processes}'}", "learning_rate=1e-4", *overrides]}


def _launch(tmp_path: Path, jobs: list[dict], processes: int, env: dict | None = None, check: bool = True):
    """Run `jobs` one after the other in one launch of `processes` processes: what each saved, by name
    (with ``check=False``, the finished process)."""
    plan = tmp_path / f"plan-{jobs[0]['name']}-{len(jobs)}-{processes}.json"
    plan.write_text(json.dumps(jobs))
    args = [str(HERE / "run_training.py"), "--plan", str(plan)]
    if processes > 1:
        args = ["-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_addr", "127.0.0.1",
                "--master_port", str(_free_port()), *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                            timeout=300 + 120 * len(jobs))
    if not check:
        return result
    assert result.returncode == 0, result.stderr[-3000:]
    return {job["name"]: torch.load(job["out"], weights_only=False) for job in jobs}


def _run(tmp_path: Path, name: str, algo: str, overrides: list[str], processes: int, env: dict | None = None,
         check: bool = True):
    """One run in a launch of its own."""
    launched = _launch(tmp_path, [_job(tmp_path, name, algo, overrides, processes)], processes, env, check)
    return launched[name] if check else launched


def _comparison_jobs(tmp_path: Path, processes: int) -> list[dict]:
    return ([_job(tmp_path, f"tools-{algo}", algo, TOOL_OVERRIDES, processes, tools=True) for algo in TOOL_ALGOS]
            + [_job(tmp_path, name, algo, overrides, processes) for name, (algo, overrides) in CASES.items()])


@pytest.fixture(scope="module")
def launches(tmp_path_factory):
    """Every case's one-process run (one launch) and two-process run (one launch of two
    processes, which then trains the resume test's uninterrupted run and its stopped first leg,
    and at its exit reports whether each process's group is still alive: ``alive.rank<N>``)."""
    tmp_path = tmp_path_factory.mktemp("data_parallel")
    one = _launch(tmp_path, _comparison_jobs(tmp_path, 1), processes=1)
    two = _launch(tmp_path, _comparison_jobs(tmp_path, 2)
                  + [_job(tmp_path, "straight", "grpo", RESUME_COMMON + ["max_steps=3"], 2),
                     _job(tmp_path, "legs", "grpo", RESUME_COMMON + ["max_steps=1"], 2)], processes=2,
                  env={"TEARDOWN_REPORT": str(tmp_path / "alive")})
    return tmp_path, one, two


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
@pytest.mark.parametrize("algo", TOOL_ALGOS)
def test_two_processes_equal_one_process_with_tools(launches, algo):
    """Multi-turn rollouts with an environment: the same trajectories, losses and parameters."""
    _, ones, twos = launches
    one, two = ones[f"tools-{algo}"], twos[f"tools-{algo}"]
    assert one["rollouts"] == two["rollouts"] and "[tool: increment -> " in one["rollouts"][0][0]
    for a, b in zip(one["rows"], two["rows"]):
        assert a["loss"] == pytest.approx(b["loss"], abs=LOSS_TOL)
        for key in ("tools/call_frequency", "tools/failure_frequency", "rewards/Counter/mean"):
            assert a[key] == pytest.approx(b[key], abs=1e-7), key
    moved = max((one["parameters"][k] - two["parameters"][k]).abs().max().item() for k in one["parameters"])
    assert moved < PARAMETER_TOL


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
@pytest.mark.parametrize("name", list(CASES))
def test_two_processes_equal_one_process(launches, name):
    _, ones, twos = launches
    one, two = ones[name], twos[name]
    assert len(one["rollouts"]) == len(two["rollouts"]) >= 1
    assert one["rollouts"] == two["rollouts"]  # the same completions, row for row
    assert len(one["rows"]) == len(two["rows"]) == 3
    for a, b in zip(one["rows"], two["rows"]):
        assert a["loss"] == pytest.approx(b["loss"], abs=LOSS_TOL)
        assert a["reward"] == pytest.approx(b["reward"], abs=1e-7)
    assert one["parameters"].keys() == two["parameters"].keys()
    moved = max((one["parameters"][k] - two["parameters"][k]).abs().max().item() for k in one["parameters"])
    assert moved < PARAMETER_TOL
    # and training did something: the parameters left their start
    from course_lib.models import load_policy

    start = dict(load_policy("tiny")[0].named_parameters())
    assert any(not torch.equal(start[k], v) for k, v in one["parameters"].items() if k in start)


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
def test_processes_with_different_configs_stop_before_any_work(tmp_path):
    result = _run(tmp_path, "mismatch", "grpo", [], processes=2, env={"RANK_DEPENDENT_SEED": "1"}, check=False)
    assert result.returncode != 0
    assert result.stderr.count("were given different configs (fields: seed)") == 2  # said on both processes


def test_a_launch_that_does_not_match_num_processes_is_refused(tmp_path):
    from course_lib.algos import make_config
    from course_lib.data import get_task
    from course_lib.models import load_policy
    from course_lib.rewards import get_reward_functions
    from course_lib.trainer import Trainer

    config = make_config("grpo", per_device_train_batch_size=4, num_generations=4, num_processes=2, max_steps=1,
                         output_dir=str(tmp_path))
    model, tokenizer = load_policy("tiny")
    with pytest.raises(ValueError, match="num_processes=2 but this run was launched with 1 process"):
        Trainer(config, get_reward_functions(["proximity_reward"]), get_task("arithmetic", n=16), model, tokenizer)
    with pytest.raises(ValueError, match="device='cuda'"):
        if torch.cuda.is_available():
            pytest.skip("a GPU is present")
        Trainer(make_config("grpo", device="cuda", per_device_train_batch_size=4, num_generations=4, max_steps=1,
                            output_dir=str(tmp_path)), get_reward_functions(["proximity_reward"]),
                get_task("arithmetic", n=16), model, tokenizer)


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
def test_workers_tear_their_process_group_down_before_the_interpreter_exits(launches):
    """A gloo group left alive at interpreter finalization can abort a worker (SIGABRT after a
    finished run); the trainer destroys it at exit on every process (the two-process launch of
    the comparisons ends by the ordinary exit, after its last run)."""
    tmp_path, _, _ = launches
    assert [(tmp_path / f"alive.rank{rank}").read_text() for rank in (0, 1)] == ["False", "False"]


def test_a_finished_worker_leaves_without_interpreter_teardown():
    """exit_worker: output flushed, the code kept, no atexit handler run (the teardown is skipped);
    outside a launched worker it only returns the code."""
    from course_lib.run.distributed import exit_worker

    assert "LOCAL_RANK" in os.environ or exit_worker(5) == 5
    script = ("import atexit, sys\n"
              "from course_lib.run.distributed import exit_worker\n"
              "atexit.register(lambda: print('teardown ran'))\n"
              "print('saved', end='')\n"
              "sys.stderr.write('still here')\n"
              "exit_worker(3)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120,
                            env={**os.environ, "LOCAL_RANK": "0", "PYTHONPATH": str(ROOT)})
    assert (result.returncode, result.stdout, result.stderr) == (3, "saved", "still here")


@pytest.mark.slow
@pytest.mark.xdist_group("distributed")
def test_two_processes_resume_where_they_stopped(launches):
    """Stopped after step 1 with half a generation batch in flight, resumed in a launch of its
    own: as the uninterrupted run."""
    tmp_path, _, twos = launches
    straight = twos["straight"]
    checkpoint = tmp_path / "legs-2" / "checkpoint-1"
    assert checkpoint.is_dir()
    resumed = _run(tmp_path, "legs", "grpo", RESUME_COMMON + ["max_steps=3"], processes=2,
                   env={"RESUME_FROM": str(checkpoint)})
    assert [row["step"] for row in resumed["rows"]] == [1, 2, 3]
    for a, b in zip(straight["rows"], resumed["rows"]):
        assert a["loss"] == pytest.approx(b["loss"], abs=LOSS_TOL)
    for name, value in straight["parameters"].items():
        assert torch.allclose(value, resumed["parameters"][name], atol=1e-6), name


def test_precisions_the_device_cannot_run_are_refused_before_any_work(tmp_path, monkeypatch):
    from course_lib.run import distributed
    from course_lib.algos import make_config

    def accelerator_for(**overrides):
        return distributed.make_accelerator(make_config("grpo", device="cpu", output_dir=str(tmp_path), **overrides))

    with pytest.raises(ValueError, match="dtype='float16' on a CPU"):
        accelerator_for(dtype="float16")
    monkeypatch.setattr(distributed, "cpu_supports_bfloat16", lambda: False)
    with pytest.raises(ValueError, match="no native bfloat16"):
        accelerator_for(dtype="bfloat16")
    monkeypatch.setattr(distributed, "cpu_supports_bfloat16", lambda: True)
    assert accelerator_for(dtype="bfloat16").device.type == "cpu"
