"""Hand a GRPO, SFT or DPO run over to TRL: ``python -m course_lib export-trl ... --output run/``.

For a run that outgrows the course trainer (many GPUs, DeepSpeed, a server-mode vLLM),
this writes what TRL's own command line needs to train the same thing:

- ``grpo.yaml`` (``sft.yaml``, ``dpo.yaml``): a ``trl grpo --config`` (``trl sft``, ``trl dpo``)
  file: the config's fields under TRL's names (each config's ``to_trl_config``), the model
  (a local folder), LoRA as TRL's ``use_peft`` / ``lora_*`` fields, the data and, for GRPO,
  the reward functions;
- ``data/train.jsonl``: the prompts and reference columns (SFT: prompt and completion, or
  messages; DPO: prompt, chosen, rejected), read by ``load_dataset``;
- ``model/``: a copy of a local model folder (the embedded ``tiny`` and ``smollm2-135m`` too);
- ``course_rewards.py`` (GRPO): the reward functions, importable by dotted path
  (``course_rewards.<name>``), as TRL's script loads custom rewards; your own reward
  modules are copied next to it when they are plain files (``course_lib.cli.export_rewards``);
- ``README.txt``: the ``trl grpo`` / ``accelerate launch`` commands, and every field whose
  value here differs from TRL's default or whose meaning differs between the two trainers.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from pathlib import Path
from typing import Any

from ..common.wording import fix

#: The ``trl`` subcommand (and YAML file name) of each algorithm an export hands over.
TRL_COMMANDS = {"grpo": "grpo", "sft": "sft", "dpo": "dpo"}
#: The dataset columns TRL's SFT and DPO scripts read (any one set of each algorithm's).
DATA_COLUMNS = {"sft": (("prompt", "completion"), ("messages",)), "dpo": (("prompt", "chosen", "rejected"),)}

_EVALUATION = ("evaluation: the course's --eval-n / --correct greedy accuracy before and after has no TRL counterpart "
               "(TRL's eval reports its losses or rewards on eval_dataset)")
_OUTPUT_FOLDER = ("output folder: the course refuses a non-empty output_dir unless the run resumes or overwrites it; "
                  "TRL writes into it (and both save checkpoint-<last> at the end of a run)")
_TOKENS = ("tokens: the prompt and the completion are tokenized apart here (the completion followed by eos); TRL "
           "tokenizes the prompt and prompt + completion (eos appended to the text), so a token can merge across "
           "the boundary there")
_ORDER = ("row order: the course's sampler draws rows in its own seeded order; TRL shuffles the dataset each epoch "
          "with its own seed")

#: What the course trainer does differently from TRL 1.16's trainers, whatever the config.
BEHAVIOUR_DIFFERENCES = {"grpo": [
    "generation batch order: the course trainer consumes it in order (the schedule tables); TRL shuffles it",
    "sampling seeds: one per completion here (global index); TRL draws from one stream per process",
    "prompt truncation: max_prompt_length truncates prompts from the left here; TRL 1.16's GRPOConfig has no "
    "such field (trim the data instead)",
    "log-probs: the fused chunked head and the shared-prompt forward here give the same values as TRL's "
    "forward up to float rounding",
    _OUTPUT_FOLDER, _EVALUATION],
    "sft": [_TOKENS, _ORDER, "packing: with packing=True the course's loop packs each micro-batch's examples in "
            "one row (a step trains per_device_train_batch_size examples); TRL packs the dataset into rows of "
            "max_length, so one TRL step trains as many examples as fit",
            "assistant_only_loss: here the assistant's tokens are found by rendering prefixes of each conversation "
            "(any prefix-preserving chat template); TRL reads {% generation %} markers and refuses a template it "
            "cannot patch (the tiny model's and SmolLM2's ChatML among them)", _OUTPUT_FOLDER, _EVALUATION],
    "dpo": [_TOKENS, _ORDER, "batch size: per_device_train_batch_size counts rows here (a pair's chosen and "
            "rejected are two) and pairs in TRL; the export halves it", _OUTPUT_FOLDER, _EVALUATION],
}


def _yaml_value(value: Any) -> str:
    return json.dumps(value)  # JSON scalars and lists are valid YAML


# Fields that TRL's __post_init__ fills from others (a path, a derived count): not settings.
_DERIVED_BY_TRL = {"logging_dir", "generation_batch_size", "disable_tqdm", "debug", "report_to", "pad_to_multiple_of"}


def _is_data(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_is_data(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _plain(value: Any) -> Any:
    return getattr(value, "value", value)  # enums as their strings


def changed_fields(config) -> list[tuple[str, Any, Any]]:
    """``(field, value here, TRL's default)`` for every field of the TRL config that differs."""
    trl_config = config.to_trl_config(report_to="none")
    changed = []
    for field in dataclasses.fields(trl_config):
        if not field.init or field.name == "output_dir":
            continue
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default
        ours = _plain(getattr(trl_config, field.name))
        if not _is_data(ours) or field.name in _DERIVED_BY_TRL:
            continue  # objects TRL builds itself from other fields
        if ours != _plain(default):
            changed.append((field.name, ours, _plain(default)))
    return changed


def trl_arguments(config, changed: list[tuple[str, Any, Any]] | None = None) -> dict[str, Any]:
    """The ``trl grpo`` (``sft``, ``dpo``) config-file fields for a course config (model and LoRA included)."""
    from ..models import resolve_model_path

    changed = changed_fields(config) if changed is None else changed  # `changed_fields(config)`, when known
    arguments = {name: ours for name, ours, _ in changed}
    arguments["model_name_or_path"] = str(resolve_model_path(config.model_name_or_path))
    if config.use_lora:
        arguments.update(use_peft=True, lora_r=config.lora_r, lora_alpha=config.lora_alpha,
                         lora_dropout=config.lora_dropout, lora_target_modules=list(config.lora_target_modules))
    return arguments


def _copy_model(source: Path, target: Path) -> None:
    """The model's files (weights, config, tokenizer) into the export; no caches or sub-folders."""
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file():
            shutil.copy2(path, target / path.name)


#: What an export writes in its folder (and the copies of reward modules, ``*.py``).
_WRITTEN = ("grpo.yaml", "sft.yaml", "dpo.yaml", "data", "data/train.jsonl", "course_rewards.py", "README.txt", "model")


def _check_output_folder(output: Path) -> None:
    """Refuse an ``output`` that is a file, or that holds a symbolic link where the export writes:
    writing through it would change a file outside the folder."""
    if output.exists() and not output.is_dir():
        raise ValueError(f"export-trl: {fix('--output', 'output')} {str(output)!r} is an existing file, not a folder. Fix: pass a "
                         "folder path (a new one, or an earlier export to update).")
    if not output.is_dir():
        return
    links = [name for name in _WRITTEN if (output / name).is_symlink()]
    links += sorted(p.name for p in output.glob("*.py") if p.is_symlink() and p.name not in links)
    if links:
        raise ValueError(f"export-trl: {fix('--output', 'output')} {str(output)!r} holds symbolic links where the export writes "
                         f"({', '.join(links)}); writing through them would change files outside the folder. "
                         "Fix: delete the links (or export into a new folder).")


def _json_line(row: dict, index: int) -> str:
    """One row of ``data/train.jsonl``; a value JSON cannot hold is refused naming its row and column."""
    try:
        return json.dumps(row) + "\n"
    except (TypeError, ValueError):
        for column, value in row.items():
            try:
                json.dumps(value)
            except (TypeError, ValueError):
                raise ValueError(f"export-trl: dataset row {index}, column {column!r} holds a {type(value).__name__} "
                                 f"({str(value)[:40]!r}), which data/train.jsonl (JSON) cannot carry. Fix: turn the "
                                 f"column into text or numbers (e.g. decode bytes), or drop {column!r}.") from None
        raise


def launch_command(output: str | Path, algo: str = "grpo") -> str:
    """``cd <output> && trl grpo --config grpo.yaml`` (``sft``, ``dpo``) for the export's current place,
    shell-quoted (a folder named with ``$(...)`` or a quote stays one word, and nothing in its name runs)."""
    command = TRL_COMMANDS[algo]
    return f"cd {shlex.quote(str(Path(output).resolve()))} && trl {command} --config {command}.yaml"


def _supervised_rows(algo: str, dataset, columns: list[str]) -> list[dict]:
    """SFT's or DPO's rows with only the columns TRL's script reads; a string completion of a chat prompt
    becomes the assistant's message (TRL reads prompt and completion both as text or both as messages)."""
    wanted = next((names for names in DATA_COLUMNS[algo] if set(names) <= set(columns)), None)
    if wanted is None:
        needed = " or ".join("+".join(names) for names in DATA_COLUMNS[algo])
        raise ValueError(f"export-trl: an {algo} run's dataset needs the columns {needed}; it has {columns}. Fix: "
                         "export the dataset the run trains on (python -m course_lib export-trl --algo "
                         f"{algo} builds it from --task).")
    rows = []
    for row in dataset:
        kept = {name: row[name] for name in wanted}
        if isinstance(kept.get("prompt"), list):
            for name in ("completion", "chosen", "rejected"):
                if isinstance(kept.get(name), str):
                    kept[name] = [{"role": "assistant", "content": kept[name]}]
        rows.append(kept)
    return rows


def export_run(config, rewards: list, dataset, output: str | Path, num_processes: int = 1,
               copy_model: bool = True, tools: list | None = None, environment_factory=None) -> Path:
    """Write ``grpo.yaml``, ``data/train.jsonl``, ``course_rewards.py`` and ``README.txt`` into ``output``
    (for an SFT or DPO run: ``sft.yaml`` or ``dpo.yaml``, the data and the README; no rewards).

    ``rewards``: shipped reward names, your own functions (callables defined at the top level
    of a module), or references ``module:function`` / ``file.py:function``. Each must resolve
    now: what cannot be imported here would fail later inside TRL (``course_lib.cli.export_rewards``).
    With ``copy_model`` a local model folder (the embedded models included) is copied to
    ``model/``; every path in ``grpo.yaml`` is relative to ``output``, so the folder moves
    between machines. Run the printed ``cd <output> && trl grpo --config grpo.yaml``.

    ``tools`` / ``environment_factory``: pass what the run's ``Trainer`` got, so that a run with
    tools is refused with the way to hand it over (a YAML file cannot carry Python objects),
    also when ``max_tool_calling_iterations`` was left at its default.
    """
    from .export_rewards import check_reward_columns, write_reward_module
    from ..models import resolve_model_path

    if config.algo not in TRL_COMMANDS:
        from ..algos import NOT_EXPORTED

        raise ValueError(f"export_run: config.algo is {config.algo!r}; GRPO, SFT and DPO runs are exported "
                         f"({NOT_EXPORTED.get(config.algo, 'no TRL trainer matches it')}). Fix: export a "
                         f"{fix('run with --algo grpo, sft or dpo', 'GRPOConfig, SFTConfig or DPOConfig')}.")
    command = TRL_COMMANDS[config.algo]
    columns = getattr(dataset, "column_names", None) or (list(dataset[0]) if len(dataset) else [])
    marks = [f"max_tool_calling_iterations={config.max_tool_calling_iterations}"] \
        if config.max_tool_calling_iterations is not None else []
    marks += ["tools"] if tools else []
    marks += ["environment_factory"] if environment_factory is not None else []
    marks += ["the dataset's 'environment' column"] if "environment" in columns else []
    if marks:
        raise ValueError(f"export-trl: {', '.join(marks)} mark a run with tools, and tools and environments "
                         "are Python objects that `trl grpo --config` cannot load from a YAML file; TRL 1.16 "
                         "takes them only in Python, as GRPOTrainer(..., tools=[...], environment_factory=...). "
                         "Fix: build that GRPOTrainer in a script with the same functions and environment class "
                         "(the config fields of grpo.yaml carry over), or export without tools for a single-turn "
                         "run.")
    with_rewards = config.algo == "grpo"  # SFT and DPO read demonstrations or pairs, not rewards
    if with_rewards:
        check_reward_columns(rewards, columns)  # before anything is written
    rows = dataset if with_rewards else _supervised_rows(config.algo, dataset, columns)
    changed = changed_fields(config)  # builds TRL's config once: a field TRL cannot take is refused here
    arguments = trl_arguments(config, changed)
    output = Path(output)
    _check_output_folder(output)
    lines = [_json_line(row, index) for index, row in enumerate(rows)]  # refused before anything is written
    output.mkdir(parents=True, exist_ok=True)
    reward_paths, notes = write_reward_module(rewards, output) if with_rewards else ([], [])
    (output / "data").mkdir(exist_ok=True)
    with (output / "data" / "train.jsonl").open("w") as handle:
        handle.writelines(lines)
    model = resolve_model_path(config.model_name_or_path)
    if copy_model and isinstance(model, Path):
        _copy_model(model, output / "model")
        arguments["model_name_or_path"] = "model"
    # Relative to the export folder: TRL runs from it (``cd <output>`` in the commands).
    arguments.update(dataset_name="data", output_dir="trl-output")
    if with_rewards:
        arguments["reward_funcs"] = reward_paths
    (output / f"{command}.yaml").write_text("".join(f"{k}: {_yaml_value(v)}\n" for k, v in sorted(arguments.items())))
    # No absolute path: the folder moves as a whole, so its commands run from wherever it is now.
    commands = [f"trl {command} --config {command}.yaml",
                f"accelerate launch --num_processes {int(num_processes)} -m trl.scripts.{command} --config {command}.yaml"]
    lines = ["Train this run with TRL, from this folder:", *(f"  {c}" for c in commands), "",
             *(["Reward functions:", *(f"  {n}" for n in notes), ""] if with_rewards else []),
             "Fields whose value differs from TRL's default:",
             *(f"  {name}: {ours!r} here, TRL's default {theirs!r}"
               for name, ours, theirs in changed), "",
             "What differs in behaviour, whatever the fields:",
             *(f"  {d}" for d in BEHAVIOUR_DIFFERENCES[config.algo]), ""]
    (output / "README.txt").write_text("\n".join(lines))
    return output
