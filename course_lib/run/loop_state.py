"""The training loop's resumable state, as one object: where the run is, and what it holds in flight.

The loop of :class:`~course_lib.trainer.Trainer` advances it; a checkpoint saves it and a resume
restores it (:mod:`course_lib.run.trainer_state`); the batch generators (``sampled_batches``,
``dataset_batches``) and the asynchronous worker (``async_rollouts``) read and advance the parts
they own (the prompt sampler, the cycle count, the tokens seen, the samples to print):

- the counters: optimizer ``step``, ``micro_step``, generation ``cycle``, ``tokens_seen``;
- the batch in flight and how many of its micro-batches were consumed (``batch_position``);
- the prompt sampler's position (``sampler``: epoch and position in its permutation);
- the samples of the last batch, printed every ``logging_steps`` (``last_samples``);
- between two optimizer steps: the micro-steps' metrics (``window``) and whether the engine
  still has older weights than the policy (``weights_dirty``).

The loop is micro-step-major (one ``while`` over micro-steps, a batch drawn when the last one
is used up) rather than nested as CleanRL's ``for update: rollout; for epoch: for minibatch``,
so that a run can stop, save and resume in the middle of a generation batch, and so that
``max_steps`` may end mid-cycle: the counters above are that position.

On disk the counters and the sampler are the JSON entries of ``trainer_state.json``
(:meth:`LoopState.counters`); the batch in flight and its samples are the ``rollout`` file
(:meth:`LoopState.in_flight`). The names are the ones checkpoints have always used, so a
checkpoint written before this object existed loads unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .batches import GenerationBatch, PromptSampler

#: The whole-number counters a checkpoint keeps (``trainer_state.json`` keys).
COUNTERS = ("step", "micro_step", "cycle", "tokens_seen", "batch_position")


@dataclass
class LoopState:
    """Where the training loop is: the counters, the batch in flight, the prompt sampler's position."""

    sampler: PromptSampler
    step: int = 0            # optimizer steps done
    micro_step: int = 0      # micro-batches done
    cycle: int = 0           # generation batches made (sampled, or read from the dataset)
    tokens_seen: int = 0     # prompt + completion tokens of every process, all rounds
    batch: GenerationBatch | None = None
    batch_position: int = 0  # micro-batches of `batch` consumed
    last_samples: tuple | None = None  # (prompts, completions, rewards, advantages) to print
    weights_dirty: bool = False  # True after an optimizer step, until the engine has the new weights
    window: list[dict] = field(default_factory=list)  # metrics of the micro-steps since the last optimizer step

    def needs_batch(self, micro_steps_per_cycle: int) -> bool:
        """True before the first batch and once every micro-batch of the current one was consumed."""
        return self.batch is None or self.batch_position >= micro_steps_per_cycle

    def between_steps(self, gradient_accumulation_steps: int) -> bool:
        """True when no accumulation window is open (the state a checkpoint may be written in)."""
        return self.micro_step % gradient_accumulation_steps == 0 and not self.window

    def epoch(self) -> float:
        """Epochs of the dataset drawn so far, fractional (TRL's ``epoch``)."""
        return self.sampler.epoch + self.sampler.position / self.sampler.num_rows

    def sync_engine(self, engine, model) -> None:
        """Push the policy's weights to the rollout engine if an optimizer step changed them since."""
        if self.weights_dirty:
            engine.sync_weights(model)
            self.weights_dirty = False

    # ------------------------------------------------------------------ checkpoints
    def counters(self) -> dict:
        """The JSON part of a checkpoint: the counters and the sampler's ``{"epoch", "position"}``."""
        return {**{name: getattr(self, name) for name in COUNTERS}, "sampler": self.sampler.state()}

    def in_flight(self) -> dict | None:
        """The batch being consumed and its samples (the checkpoint's ``rollout`` file), or None."""
        return None if self.batch is None else {"batch": self.batch, "samples": self.last_samples}

    def restore(self, saved: dict, in_flight: dict | None) -> None:
        """Take the counters and sampler position of ``trainer_state.json`` and this process's batch in
        flight; the engine gets the restored weights before it samples again."""
        for name in COUNTERS:
            setattr(self, name, saved[name])
        s = self.sampler
        self.sampler = PromptSampler(s.num_rows, s.seed, **saved["sampler"], shuffle=s.shuffle)
        if in_flight is not None:
            self.batch, self.last_samples = in_flight["batch"], in_flight["samples"]
        self.weights_dirty = True
