"""Asynchronous generation: a worker process samples the next generation batches while the trainer learns.

With ``async_generation=True`` the trainer's batches come from :class:`AsyncSampledBatches`, the
synchronous batch generator whose completions :class:`AsyncGeneration` samples: a second process
(``torch.multiprocessing``, a fork server: see :func:`_worker_context`) holding its own copy of
the policy and an HF engine. The
trainer keeps drawing every cycle's prompts, seeds and rows exactly as the synchronous loop
does; the worker only samples them, with the weights of an older optimizer step, while the
trainer's core learns from the batch before. Rewards, log-probs and advantages stay in the
trainer. The names follow TRL 1.16's experimental ``AsyncGRPOConfig``:

- ``max_staleness``: a batch consumed when the trainer has made ``s`` optimizer steps was
  sampled with the weights of step ``v >= s - max_staleness``. Nothing is ever dropped: the
  worker is never sent a cycle before the weights it must use exist, so it runs at most
  ``max_staleness`` versions ahead and the trainer *waits* for a batch instead (TRL drops
  stale samples and pulls the next; with a deterministic schedule there is none to drop).
- ``weight_sync_steps``: the worker receives weights only at optimizer steps that are
  multiples of it (at most ``max_staleness + 1``, so the bound above always holds). Cycle
  ``c``, consumed at step ``s_c``, is sampled with version ``v_c = ceil((s_c - S) / k) * k``
  (at least 0): the oldest allowed one, so that generation overlaps learning as much as the
  bound permits. ``v_c`` depends on the schedule only, never on timing: a run is
  reproducible, and ``max_staleness=0`` samples exactly what the synchronous trainer samples.

Each batch carries its version and the worker's sampling log-probs. ``async_old_logps`` says how a
stale batch is corrected:

- ``"sampler"`` (the default, as TRL's ``AsyncGRPOTrainer``): the worker's log-probs are the
  clip's old log-probs, so the ratio ``pi_theta / pi_sampler`` measures the whole gap between the
  weights that sampled and the weights that learn, and PPO's clip bounds it (Schulman et al.
  2017, eq. 7, with the behaviour policy as "old"). The trainer runs no forward pass before
  learning: generation's share of the step moves entirely to the worker.
- ``"recompute"`` (decoupled PPO; Hilton et al. 2022, used by AReaL): the trainer recomputes the
  log-probs under its current weights, the clip is taken around those, and the sampling
  correction (``vllm_importance_sampling_*``, on by default here) reweights or masks each
  completion by ``pi_trainer / pi_sampler``. One extra forward pass per batch.

History rows get
``sample/staleness_mean`` and ``sample/staleness_max`` (TRL's names: optimizer steps between the
sampling weights and the trainer's when the batch is taken) and ``perf/rollout_wait_s`` (the
trainer's wait for the batch); the clip's ``clip_ratio/*`` show how far stale samples moved
(with ``"recompute"``, the correction's ``sampling/*`` statistics as well).

Failures: a worker that raises sends its traceback, one that dies (killed, out of memory)
is noticed within half a second, and one that sends nothing for ``async_batch_timeout_s``
(stopped, stuck) is killed; each stops the run with a ``GenerationWorkerError``, never a hang.
The trainer first saves a checkpoint of the steps it completed, as a stop signal does, and the
message names it (or says that none exists). The worker ignores Ctrl-C (the trainer saves, then stops it) and exits when the trainer's
process is gone. On resume the batches that were in flight are regenerated from the resumed
weights (their sampling weights were not saved), so the first ones are fresher than in the
uninterrupted run; a checkpoint may also resume with ``async_generation=False`` (or another bound).
Limits: one process, the HF engine, no dynamic sampling, no tool calls.
"""

from __future__ import annotations

import dataclasses
import math
import os
import queue
import signal
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from .batches import DatasetRows, Generated, PromptSampler, cycle_seed, micro_steps_per_cycle, repeat_prompts
from .folder import _owner_is_dead, _owner_record
from .loop_state import LoopState
from .sampled_batches import SampledBatches


#: Least seconds the worker's start-up may take (a new interpreter imports torch and copies the model).
STARTUP_S = 600.0
#: What the fork server imports once, before it forks any worker (the model's own module is added).
WORKER_PRELOAD = ("torch", "transformers", "course_lib.run.async_rollouts", "course_lib.rollout.hf")


def _worker_context(model):
    """The multiprocessing context the worker starts from: a fork server on Linux, else spawn (on
    macOS a process forked after system frameworks loaded may crash, so Python spawns there too).

    A spawned worker is a new interpreter that imports torch, transformers and the library before
    it can sample: about 10 CPU s (measured on a 2-core x86 machine), paid by every run. The fork
    server does those imports once per trainer process (:data:`WORKER_PRELOAD`, and the module of
    the model's class) and forks each worker from there, already imported, so a second run in the
    same process (a notebook re-run, a benchmark's modes, the tests) starts its worker in about a
    second (a 3-step run of the tiny model: 15 s of wall time with a spawned worker, 1.5 s). Forking
    from a server that has imported torch but never ran an operator is safe (no thread pool to
    inherit), unlike forking the trainer itself. The server keeps the environment variables it
    started with: a variable changed later in the same process does not reach the next worker."""
    import sys

    if not sys.platform.startswith("linux"):
        return torch.multiprocessing.get_context("spawn")
    context = torch.multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([*WORKER_PRELOAD, type(model).__module__])  # read when the server starts
    return context


def _trainer_gone(trainer: dict, first_parent: int) -> bool:
    """True once the trainer's process has ended. A forked worker's parent is the fork server,
    which exits when the trainer does (its pipe to the trainer closes); a spawned worker's parent
    is the trainer. Either way the worker is re-parented. ``trainer`` is the trainer's
    :func:`~course_lib.run.folder._owner_record` (pid, host, start time): the run folder's lock
    asks the same question of its owner, reused pids included."""
    return os.getppid() != first_parent or _owner_is_dead(trainer)


class GenerationWorkerError(RuntimeError):
    """The generation worker failed or died; the run stops instead of waiting forever."""


# The messages between the trainer and the worker (pickled through two queues).
@dataclasses.dataclass(frozen=True)
class Weights:
    """Trainer -> worker: the weights of ``version`` (an optimizer step) are in shared slot ``slot``."""

    version: int
    slot: int


@dataclasses.dataclass(frozen=True)
class Generate:
    """Trainer -> worker: sample cycle ``cycle`` (one completion a row) with the latest weights."""

    cycle: int
    prompts: list
    sampling: Any


@dataclasses.dataclass(frozen=True)
class Stop:
    """Trainer -> worker: leave."""


@dataclasses.dataclass(frozen=True)
class Sampled:
    """Worker -> trainer: cycle ``cycle`` sampled with the weights of ``version``, in ``seconds``."""

    cycle: int
    version: int | None
    rollout: Any  # a RolloutBatch with numpy arrays for its tensors (_by_value)
    seconds: float


@dataclasses.dataclass(frozen=True)
class Ready:
    """Worker -> trainer: start-up is over; from now on each batch has ``async_batch_timeout_s``."""


@dataclasses.dataclass(frozen=True)
class WorkerFailed:
    """Worker -> trainer: the worker raised; its traceback."""

    traceback: str


def sampled_version(cycle: int, config, start_step: int = 0) -> tuple[int, int]:
    """``(s_c, v_c)``: the optimizer step at which cycle ``cycle`` is taken, and the weights' version
    that samples it (never older than ``start_step``, the step the pipeline started at)."""
    taken = cycle * micro_steps_per_cycle(config) // config.gradient_accumulation_steps
    k = config.weight_sync_steps
    version = math.ceil(max(0, taken - config.max_staleness) / k) * k
    return taken, min(taken, max(version, start_step))


def _trainable(model) -> dict:
    """The trainable parameters grouped by dtype: ``{dtype: [(name, parameter), ...]}``."""
    groups: dict = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault(str(p.dtype), []).append((name, p))
    return groups


def _weight_slots(model, count: int) -> list[dict]:
    """``count`` shared-memory copies of the trainable parameters, one flat tensor per dtype each.

    The worker receives them once, at start; afterwards a weight update is a copy into a slot
    and a message naming it, instead of new shared memory for every update (measured on the
    tiny model: a 0.9M-parameter tensor sent through the queue costs ~4.5 ms each way).
    """
    return [{dtype: ([n for n, _ in items], torch.empty(sum(p.numel() for _, p in items), dtype=items[0][1].dtype)
                     .share_memory_()) for dtype, items in _trainable(model).items()} for _ in range(count)]


def _write_slot(model, slot: dict) -> None:
    with torch.no_grad():
        for dtype, items in _trainable(model).items():
            torch.cat([p.detach().reshape(-1) for _, p in items], out=slot[dtype][1])


def _load_flat(model, flat: dict) -> None:
    params = dict(model.named_parameters())
    with torch.no_grad():
        for names, values in flat.values():
            offset = 0
            for name in names:
                p = params[name]
                p.copy_(values[offset: offset + p.numel()].view_as(p))
                offset += p.numel()


def _by_value(rollout):
    """The batch with numpy arrays for tensors: small arrays pickle by value, where each tensor would
    get a shared-memory file and a descriptor handed over a socket (~0.5 ms a tensor)."""
    return dataclasses.replace(rollout, **{f.name: getattr(rollout, f.name).numpy() for f in dataclasses.fields(rollout)
                                           if isinstance(getattr(rollout, f.name), torch.Tensor)
                                           and getattr(rollout, f.name).dtype != torch.bfloat16})  # numpy has none


def _as_tensors(rollout):
    return dataclasses.replace(rollout, **{f.name: torch.from_numpy(getattr(rollout, f.name))
                                           for f in dataclasses.fields(rollout)
                                           if isinstance(getattr(rollout, f.name), np.ndarray)})


def _worker_main(model, tokenizer, slots, inbox, outbox, trainer: dict, threads: int) -> None:
    """The worker's loop: load weights and sample cycles, in the order the trainer sent them."""
    from ..rollout.hf import HFEngine

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's: it saves, then stops us
    first_parent = os.getppid()
    torch.set_num_threads(threads)
    try:
        engine, version = HFEngine(model, tokenizer, record_logps=True), None
        outbox.put(Ready())
        while True:
            try:
                message = inbox.get(timeout=0.5)
            except queue.Empty:
                if _trainer_gone(trainer, first_parent):
                    return
                continue
            if isinstance(message, Stop):
                return
            if isinstance(message, Weights):
                version = message.version
                _load_flat(model, slots[message.slot])
                continue
            started = time.perf_counter()
            rollout = engine.generate(message.prompts, n=1, sampling=message.sampling)
            outbox.put(Sampled(message.cycle, version, _by_value(rollout), time.perf_counter() - started))
    except Exception:  # noqa: BLE001 - everything goes back to the trainer, which raises it
        outbox.put(WorkerFailed(traceback.format_exc()))


class AsyncGeneration:
    """The trainer's side of the pipeline: sends weights and cycles ahead, takes batches in order.

    ``generate(prompts, n, sampling)`` has the engine's signature, so the trainer's generation
    round calls it in place of its engine; it checks that the prompts and sampling settings are
    those it sent for that cycle.
    """

    def __init__(self, config, state: LoopState, rows: DatasetRows, model, tokenizer, max_steps: int):
        self.config, self.state, self.rows, self.model = config, state, rows, model
        self.start_step = state.step
        s = state.sampler  # a copy: the worker's cycles are drawn ahead of the trainer's own
        self.ahead = PromptSampler(s.num_rows, s.seed, s.epoch, s.position, shuffle=s.shuffle)
        self.next_cycle = state.cycle  # the next cycle to send
        micro_steps = max_steps * config.gradient_accumulation_steps
        self.last_cycle = math.ceil(micro_steps / micro_steps_per_cycle(config))
        self.sent_version: int | None = None
        self.pending: deque = deque()  # (weights version, Generate) sent, not yet taken
        self.metrics: dict = {}
        self.worker_seconds = 0.0
        self.ready, self.started_at = False, time.monotonic()  # the worker says "ready" once it has started
        context = _worker_context(model)
        self.inbox, self.outbox = context.Queue(), context.Queue()
        import copy

        worker_model = copy.deepcopy(model).eval()
        # A slot is rewritten only max_staleness + 2 weight updates after it was sent. Every batch sampled
        # with version v is taken by step v + max_staleness, so by the time the trainer writes a version
        # >= v + max_staleness + 2 the worker has read v, generated its batches and handed them over.
        self.slots, self.sends = _weight_slots(worker_model, config.max_staleness + 2), 0
        self.process = context.Process(target=_worker_main, name="course-lib-generation", daemon=True,
                                       args=(worker_model, tokenizer, self.slots, self.inbox, self.outbox,
                                             _owner_record(), torch.get_num_threads()))
        self.process.start()
        del worker_model
        self.advance(state.step)

    # ---------------------------------------------------------------- sending
    def _sampling(self, cycle: int):
        from ..rollout import SamplingConfig

        config = self.config  # the synchronous trainer's seed of this cycle (round 0, one process)
        return SamplingConfig.from_config(config, first_row=0, seed=cycle_seed(config, cycle))

    def advance(self, step: int) -> None:
        """After optimizer step ``step``: send every cycle whose sampling weights are now known."""
        config, G = self.config, self.config.num_generations
        while self.next_cycle < self.last_cycle:
            _, version = sampled_version(self.next_cycle, config, self.start_step)
            if version > step:
                return
            if self.sent_version != version:
                slot = self.sends % len(self.slots)
                _write_slot(self.model, self.slots[slot])
                self.inbox.put(Weights(version, slot))
                self.sent_version, self.sends = version, self.sends + 1
            prompt_rows = self.ahead.take(config.unique_prompts_per_generation)
            rows = repeat_prompts(prompt_rows, G)
            prompts = self.rows.column("prompt", rows)
            sampling = self._sampling(self.next_cycle)
            request = Generate(self.next_cycle, list(prompts), sampling)
            self.inbox.put(request)
            self.pending.append((version, request))
            self.next_cycle += 1

    # ---------------------------------------------------------------- taking
    def generate(self, prompts, n: int, sampling):
        """The next cycle's batch, as sampled by the worker (waits for it)."""
        if not self.pending:
            raise GenerationWorkerError("no generation batch was sent for this cycle (the schedule ran past "
                                        f"the {self.last_cycle} cycles planned)")
        version, sent = self.pending.popleft()
        cycle = sent.cycle
        if n != 1 or list(prompts) != sent.prompts or sampling != sent.sampling:
            raise GenerationWorkerError(f"cycle {cycle}: the trainer asked for other prompts or sampling settings "
                                        "than were sent to the worker")
        started = time.perf_counter()
        got = self._receive(cycle)
        if (got.cycle, got.version) != (cycle, version):
            raise GenerationWorkerError(f"expected cycle {cycle} at version {version}, got cycle {got.cycle} "
                                        f"at version {got.version}")
        seconds = got.seconds
        self.worker_seconds += seconds
        staleness = float(self.state.step - version)
        self.metrics = {"sample/staleness_mean": staleness, "sample/staleness_max": staleness,
                        "perf/rollout_wait_s": time.perf_counter() - started, "perf/worker_generate_s": seconds}
        return _as_tensors(got.rollout)

    def _receive(self, cycle: int) -> Sampled:
        limit, waited_from = self.config.async_batch_timeout_s, time.monotonic()
        while True:
            try:
                message = self.outbox.get(timeout=0.5)
            except queue.Empty:
                if not self.process.is_alive():
                    raise self._died(cycle) from None
                if limit is not None and self._overdue(waited_from, limit):
                    self.process.kill()  # stopped (SIGSTOP) or stuck: it will not hand the batch over
                    self.process.join(timeout=5)
                    what = (f"sent no batch {cycle} within async_batch_timeout_s={limit} s" if self.ready else
                            f"did not start within {max(limit, STARTUP_S):g} s")
                    raise GenerationWorkerError(
                        f"the generation worker (pid {self.process.pid}) {what} (it was stopped or is stuck), so it "
                        "was killed. Fix: find what stopped it, or raise async_batch_timeout_s if a batch takes "
                        "longer on this machine (None waits without a limit).") from None
                continue
            except (OSError, EOFError) as error:  # a dead worker can no longer hand over its tensors
                self.process.join(timeout=5)
                raise self._died(cycle) from error
            if isinstance(message, WorkerFailed):
                raise GenerationWorkerError(f"the generation worker failed on batch {cycle}:\n{message.traceback}")
            if isinstance(message, Ready):
                self.ready, waited_from = True, time.monotonic()
                continue
            return message

    def _overdue(self, waited_from: float, limit: float) -> bool:
        """Past the time limit: ``limit`` seconds for a batch once the worker is ready; before, its
        start-up (importing, copying the model) gets at least :data:`STARTUP_S` from the start."""
        now = time.monotonic()
        return now - waited_from > limit if self.ready else now - self.started_at > max(limit, STARTUP_S)

    def _died(self, cycle: int) -> GenerationWorkerError:
        return GenerationWorkerError(  # AsyncSampledBatches.generate adds what was saved
            f"the generation worker (pid {self.process.pid}) exited with code {self.process.exitcode} while the "
            f"trainer waited for generation batch {cycle}.")

    def close(self) -> None:
        """Stop the worker (it finishes or drops what it holds) and release the queues."""
        if self.process.is_alive():
            self.inbox.put(Stop())
            self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(timeout=5)
        if self.process.is_alive():  # a stopped process ignores SIGTERM until continued; SIGKILL is not ignored
            self.process.kill()
            self.process.join(timeout=5)
        for q in (self.inbox, self.outbox):
            q.cancel_join_thread()
            q.close()


@dataclass
class AsyncSampledBatches(SampledBatches):
    """The RL batch generator with its completions sampled ahead by the worker (:class:`AsyncGeneration`).

    Rewards and scoring stay as in :class:`~course_lib.run.sampled_batches.SampledBatches`; the
    worker's sampling log-probs are the clip's old ones with ``async_old_logps="sampler"``.
    ``on_failure()`` saves what the trainer has when the worker fails and says what is on disk.
    """

    max_steps: int = 0
    on_failure: Callable[[], str] = lambda: ""
    pipeline: AsyncGeneration | None = None

    def __post_init__(self):
        if self.tool_run is not None:
            raise ValueError("async_generation=True cannot run multi-turn rollouts (tools / environment_factory). "
                             "Fix: set async_generation=False.")
        self.old_logps_from_sampler = self.config.async_old_logps == "sampler"
        self.pipeline = AsyncGeneration(self.config, self.state, self.rows, self.model, self.tokenizer, self.max_steps)

    def sample(self, prompts: list, sampling):
        return self.pipeline.generate(prompts, n=1, sampling=sampling)

    def generate(self) -> Generated:
        """Step 1 with the worker's completions; when the worker fails, first save what the trainer has
        (its completed steps, as a stop signal does) and say in the error what is on disk."""
        sampler = self.state.sampler
        position = sampler.state()  # before this cycle's prompts are drawn: the checkpoint's position
        try:
            generated = super().generate()
        except GenerationWorkerError as error:
            sampler.epoch, sampler.position = position["epoch"], position["position"]
            raise GenerationWorkerError(f"{error} {self.on_failure()}") from None
        generated.metrics.update(self.pipeline.metrics)  # staleness, the wait for the batch
        return generated

    def after_step(self, step: int) -> None:
        """The worker gets the weights and the cycles they now may sample."""
        self.pipeline.advance(step)

    def close(self) -> None:
        """Stop the worker (whatever ended the run)."""
        if self.pipeline is not None:
            self.pipeline.close()
            self.pipeline = None
