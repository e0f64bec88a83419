#!/usr/bin/env bash
# GPU check: the GPU tests, then eager-vs-graph latencies and one pipelined decode of every decoder, for
# random models shaped like Llama-3.2-1B (drafter) and Llama-3.1-8B (target). Under eight minutes on one
# modern GPU. Usage: tests/gpu/check.sh [--gpus 0,1] [--out DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
[[ -x $py ]] || py=python3
cd "$root"
"$py" -m pytest tests/gpu -q -p no:cacheprovider
"$py" -m tests.gpu.check "$@"
