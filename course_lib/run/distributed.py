"""Devices and processes for the trainer, through Hugging Face accelerate.

One process on a CPU or a GPU, or N data-parallel processes started by
``accelerate launch --num_processes N`` (``python -m course_lib train --num-processes N``
does the launch). The layout is TRL's, the one :mod:`course_lib.schedule` tabulates:

- every process draws the same prompts for a generation batch (same seeded sampler) and
  owns a contiguous slice of its ``U x G`` completions, ``per_device_train_batch_size x
  steps_per_generation`` rows, which it generates (per-completion seeds: the samples are
  those one process would draw) and scores;
- what an advantage needs (rewards, masks, sampling-time log-probs and values) is gathered,
  so group baselines, RLOO's leave-one-out and PPO's whitening see the whole batch, and each
  process keeps its slice of the result;
- gradients are averaged across processes by DDP (losses are scaled so that the average
  equals the one-process loss on the same global batch); metrics are averaged; only the
  main process logs and writes files.

In one process every helper here is the identity, so the same trainer code runs alone.
"""

from __future__ import annotations

import json
import os
import sys

import torch

from ..machine import cpu_supports_bfloat16


Tensor = torch.Tensor


def cuda_requested(device: str) -> bool:
    """Whether a run with `config.device` trains on CUDA: "cuda", or "auto" with a GPU present."""
    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def make_accelerator(config):
    """The `accelerate.Accelerator` of a run, checked against `config.num_processes`.

    Raises, on every process before any work: CUDA asked for without a GPU, or a launch
    whose number of processes differs from the config's (each names the field and the fix).
    """
    from accelerate import Accelerator

    if config.device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA GPU is available. Fix: set device='auto' or 'cpu'.")
    cpu = not cuda_requested(config.device)
    _forget_other_device(cpu)
    accelerator = Accelerator(cpu=cpu)
    kind = str(accelerator.distributed_type).rpartition(".")[2]
    if kind in ("DEEPSPEED", "FSDP", "MEGATRON_LM"):
        raise ValueError(f"this run was launched with {kind}; the course trainer runs data-parallel (DDP) only. "
                         "Fix: launch with configs/multi_gpu.yaml, or hand the run to TRL (python -m course_lib "
                         "export-trl ...) and launch TRL with configs/deepspeed_zero2.yaml, deepspeed_zero3.yaml or "
                         "fsdp.yaml.")
    if accelerator.num_processes != config.num_processes:
        raise ValueError(
            f"num_processes={config.num_processes} but this run was launched with {accelerator.num_processes} "
            f"process(es). Fix: set num_processes={accelerator.num_processes}, or launch with "
            f"`accelerate launch --num_processes {config.num_processes}` (python -m course_lib train "
            f"--num-processes {config.num_processes} does it).")
    _check_precision(config, accelerator.device)
    _check_same_config(accelerator, config)
    if accelerator.num_processes > 1:
        _destroy_process_group_at_exit()
    return accelerator


def _forget_other_device(cpu: bool) -> None:
    """Let one process train on the GPU, then on the CPU (a notebook's second run with device="cpu"),
    and drop another trainer's mixed-precision setting from accelerate's process-wide state.

    accelerate keeps the first run's device for the whole process and refuses another. A single
    process holds no process group, so its state can be dropped and built again; a launched
    multi-process run keeps its state, and accelerate's refusal stands there.
    """
    from accelerate.state import AcceleratorState, PartialState

    if not PartialState._shared_state or PartialState().num_processes != 1:
        return
    if (PartialState().device.type == "cpu") != cpu:
        AcceleratorState._reset_state(reset_partial_state=True)
    elif AcceleratorState._shared_state and AcceleratorState().mixed_precision != "no":
        # Another library's trainer in this process (TRL's SFTTrainer with bf16=True) left its
        # mixed precision in the shared state; this trainer's precision is config.dtype on the
        # weights, never accelerate's autocast, so that setting must not carry over silently.
        AcceleratorState._reset_state()


def _destroy_process_group_at_exit() -> None:
    """Tear the process group down while the interpreter is still whole.

    A worker that exits with its gloo group alive can die with SIGABRT ("terminate called
    without an active exception"): the group's C++ threads are destroyed during interpreter
    finalization. Scripts rarely call ``destroy_process_group`` themselves, so the trainer
    registers it once with ``atexit``; it is a no-op when the group is already gone.
    """
    import atexit

    global _TEARDOWN_REGISTERED
    if _TEARDOWN_REGISTERED:
        return
    _TEARDOWN_REGISTERED = True

    atexit.register(_destroy_live_process_group)


_TEARDOWN_REGISTERED = False


def _destroy_live_process_group() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def exit_worker(code: int = 0):
    """End a launched worker process now, without the interpreter's teardown.

    Even with its process group destroyed, a gloo worker under load sometimes died with
    SIGABRT ("terminate called without an active exception") while the interpreter shut
    down after a finished run, so the launcher reported a failure for a run that had saved
    everything. A worker that has nothing left to do flushes its output, destroys its group
    and leaves with ``os._exit`` (no ``atexit`` handlers, no C++ destructors): the course's
    own entry points (``python -m course_lib train`` under a launcher, the tests' script)
    end this way. In one process it only returns ``code``.
    """
    if "LOCAL_RANK" not in os.environ:
        return code
    import logging

    _destroy_live_process_group()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _check_precision(config, device: torch.device) -> None:
    """Refuse a precision the training device cannot run well, with the field and the fix."""
    if device.type == "cuda":
        if config.dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            raise ValueError("dtype='bfloat16' but this GPU has no bfloat16 support. Fix: dtype='auto' (float32 "
                             "here) or 'float16'.")
        return
    if config.dtype == "float16":
        raise ValueError("dtype='float16' on a CPU: half-precision training needs a GPU (and a loss scaler). "
                         "Fix: dtype='auto' or 'float32' on a CPU.")
    if config.dtype == "bfloat16" and not cpu_supports_bfloat16():
        raise ValueError("dtype='bfloat16' but this CPU has no native bfloat16 (AVX512-BF16 or AMX), so every "
                         "operation would be emulated. Fix: dtype='auto' or 'float32'.")


def _check_same_config(accelerator, config) -> None:
    """Raise on every process when the processes were given different configs."""
    if accelerator.num_processes == 1:
        return
    from accelerate.utils import gather_object

    mine = json.dumps(config.to_dict(), sort_keys=True)
    everyone = gather_object([mine])
    if any(other != mine for other in everyone):
        first = json.loads(everyone[0])
        differing = sorted(k for other in everyone for k, v in json.loads(other).items() if first.get(k) != v)
        raise ValueError(f"the {accelerator.num_processes} processes were given different configs (fields: "
                         f"{', '.join(differing)}). Fix: launch every process with the same command and settings.")


class Shards:
    """This process's rows of a generation batch, and the collectives across processes."""

    def __init__(self, accelerator, rows_per_process: int):
        self.accelerator = accelerator
        self.rank = accelerator.process_index
        self.size = accelerator.num_processes
        self.rows = slice(self.rank * rows_per_process, (self.rank + 1) * rows_per_process)
        self._is_main = accelerator.is_main_process  # fixed for the process's life; the lookup is slow

    @property
    def is_main(self) -> bool:
        return self._is_main

    def gather_rows(self, tensor: Tensor | None) -> Tensor | None:
        """(B_local, ...) on each process -> (B, ...) in process order; dim 1 padded with 0."""
        if tensor is None or self.size == 1:
            return tensor
        if tensor.dim() > 1:
            tensor = self.accelerator.pad_across_processes(tensor.contiguous(), dim=1, pad_index=0)
        return self.accelerator.gather(tensor.contiguous())

    def local_rows(self, tensor: Tensor | None, width: int | None = None) -> Tensor | None:
        """This process's rows of a gathered (B, ...) tensor, cut back to `width` columns."""
        if tensor is None or self.size == 1:
            return tensor
        tensor = tensor[self.rows]
        return tensor[:, :width] if width is not None and tensor.dim() > 1 else tensor

    def sum(self, value: float) -> float:
        """The sum of a number over processes."""
        if self.size == 1:
            return value
        total = torch.tensor(float(value), dtype=torch.float64, device=self.accelerator.device)
        return self.accelerator.reduce(total, reduction="sum").item()

    def mean_metrics(self, metrics: dict) -> dict:
        """Every numeric metric averaged over processes (one collective for all of them)."""
        if self.size == 1:
            return metrics
        names = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        values = torch.tensor([float(metrics[k]) for k in names], dtype=torch.float64, device=self.accelerator.device)
        averaged = self.accelerator.reduce(values, reduction="mean").tolist()
        return {**metrics, **dict(zip(names, averaged))}


def launch_command(num_processes: int, argv: list[str], cpu: bool) -> list[str]:
    """The command that runs ``python -m course_lib <argv>`` on ``num_processes`` processes.

    On GPUs ``accelerate launch --multi_gpu``; on CPUs torch's own launcher
    (``torch.distributed.run``, which ``accelerate launch`` drives for GPUs too), whose
    processes accelerate joins with the gloo backend.
    """
    port = os.environ.get("MASTER_PORT", "29511")
    if cpu:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(num_processes),
                    "--master_addr", "127.0.0.1", "--master_port", port]
    else:
        launcher = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes",
                    str(num_processes), "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                    "--main_process_port", port]
    return launcher + ["-m", "course_lib", *argv]
