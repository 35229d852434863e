#!/usr/bin/env bash
# The GPU check in one command (see benchmarks/gpu_check.py and benchmarks/README.md).
#
# On a machine without network access, first install the pure-Python wheels carried in a
# folder (default .whl, made beforehand with `python benchmarks/gpu_check.py --wheels .whl`)
# into a private folder on PYTHONPATH; then run every part. Arguments go to gpu_check.py.
#
#   bash benchmarks/gpu_check.sh                     # results in $OUT, else outputs/gpu_check
#   WHEELS=/path/to/wheels bash benchmarks/gpu_check.sh --parts env,logprobs
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
WHEELS="${WHEELS:-.whl}"
if compgen -G "$WHEELS/*.whl" > /dev/null; then
  SITE="${SITE:-/tmp/gpu_check_site}"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export MPLBACKEND=Agg
exec "$PYTHON" benchmarks/gpu_check.py "$@"
