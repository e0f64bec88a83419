#!/usr/bin/env bash
# The GPU check as the GPU machine would run it, in a simulated image on this machine: an interpreter with
# the image's torch and transformers releases and no pyzmq, a copy of the checkout alone in its folder whose
# only wheels are the .whl/ that `check.sh --pack` fills, and pip unable to reach any index.
#
#   tests/gpu/simulate_image.sh [--image DIR] [--build-only] [--out DIR] [--wheels FOLDER]
#
# --wheels FOLDER (default $SPECPAIR_WHEELS): where --pack takes pyzmq's and pytest's wheels from; without
# one, .whl/ must hold them already. Building the image takes the package index (once; torch's wheels are
# several GB). The runs are offline: the check without --rehearse must stop with exit status 2 and its
# one-paragraph "needs CUDA" reason (no CUDA here), in its log too, and --rehearse must pass and leave
# check.json with every section, check.log from its first line, the rounds file and values' JSON lines.
# Each run's time and status are printed; exit status 0 when both ended as expected.
#
# The image (Python 3.12.3, torch 2.11.0+cu130, transformers 5.17.0, pytest and its plugins, msgpack,
# numpy, cuda-bindings, no pyzmq) is approximated by Python 3.12 where this machine has one, else the
# newest python3.1x here, with torch==2.11.0 as the index serves it (on Linux x86-64 that is the CUDA 13.0
# build, the image's own, which finds no driver here), transformers==5.17.0 and some of the image's
# pytest plugins, so that their autoloading is rehearsed too.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
image=$root/build/sim-image build_only=0 out= wheels=${SPECPAIR_WHEELS:-}
while (($#)); do
    case $1 in
        --image) image=${2:?--image needs a folder}; shift ;;
        --out) out=${2:?--out needs a folder}; shift ;;
        --wheels) wheels=${2:?--wheels needs a folder}; shift ;;
        --build-only) build_only=1 ;;
        *) echo "simulate_image: unknown option '$1'" >&2; exit 2 ;;
    esac
    shift
done
say() { echo "simulate_image: $*" >&2; }
TORCH=torch==2.11.0 TRANSFORMERS=transformers==5.17.0
PACKAGES=("$TORCH" "$TRANSFORMERS" numpy msgpack pytest cuda-bindings
          pytest-timeout pytest-mock pytest-xdist hypothesis anyio)

# Python 3.12 as the image has it, else the nearest here; pyenv's installed versions count too
base_python() {
    local v py
    for v in 3.12 3.13 3.11; do
        for py in "python$v" ${PYENV_ROOT:-$HOME/.pyenv}/versions/"$v".*/bin/"python$v"; do
            if "$py" -c '' 2>/dev/null; then command -v "$py"; return 0; fi
        done
    done
    return 1
}

build() {
    local py stamp=$image/.built want
    py=$(base_python) || { say "no python3.11 or later on PATH"; return 1; }
    want="$($py -c 'import platform; print(platform.python_version())') ${PACKAGES[*]}"
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then
        say "image $image is built ($want)"; return 0
    fi
    [[ ${py##*/} == python3.12 ]] || say "no Python 3.12 on this machine: the image is simulated with $py"
    say "building $image with $py: ${PACKAGES[*]} (from the package index; torch's wheels are several GB)"
    rm -rf "$image"
    "$py" -m venv "$image" || return 1
    "$image/bin/python" -m pip install --quiet --disable-pip-version-check "${PACKAGES[@]}" || return 1
    if "$image/bin/python" -c 'import zmq' 2>/dev/null; then
        say "the image must not have pyzmq, but it came with a requirement"; return 1
    fi
    echo "$want" >"$stamp"
}

# The checkout as it travels: tracked and untracked-not-ignored files, plus the packed .whl/, alone in its
# folder.
copy_checkout() {
    local dest=$1
    rm -rf "$dest" && mkdir -p "$dest" || return 1
    (cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$dest" 2>/dev/null)
    [[ -d $root/.whl ]] && cp -r "$root/.whl" "$dest/.whl"
    [[ -x $dest/tests/gpu/check.sh ]] || { say "copying the checkout to $dest failed"; return 1; }
}

# The device command in the copy, offline: pip sees no index, no find-links, no configuration of this machine.
run_check() {
    local project=$1 log=$2; shift 2
    (cd "$project" && env -u PYTHONPATH -u PYTHON -u VIRTUAL_ENV -u PIP_FIND_LINKS -u PIP_INDEX_URL \
        -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 \
        http_proxy=http://127.0.0.1:9 https_proxy=http://127.0.0.1:9 PATH="$image/bin:$PATH" \
        tests/gpu/check.sh "$@") >"$log" 2>&1
}

# What the rehearsal must leave in its folder $1: every section in check.json, the log from check.sh's first
# line, the recorded section's rounds file and values' JSON lines
rehearsal_files() {
    "$image/bin/python" - "$1" <<'EOF'
import json, sys
from pathlib import Path
d = Path(sys.argv[1])
sections = json.loads((d / "check.json").read_text())["sections"]
assert len(sections) == 6 and all(r["status"] == "passed" for r in sections.values()), sections.keys()
assert (d / "check.log").read_text().startswith("check: "), "check.log does not start with check.sh's first line"
assert (d / "rounds" / "rounds.shard-1-of-1.bin").stat().st_size > 0
assert {json.loads(line)["kind"] for line in (d / "values.jsonl").read_text().splitlines()} >= {"value", "agreement"}
EOF
}

build || { say "building the image failed"; exit 1; }
((build_only)) && exit 0
if [[ -n $wheels ]]; then
    "$root/tests/gpu/check.sh" --pack "$wheels" || exit 1
elif ! compgen -G "$root/.whl/pyzmq-*.whl" >/dev/null; then
    say "no wheels to pack: name the folder that holds pyzmq's and pytest's (--wheels FOLDER or SPECPAIR_WHEELS)"
    exit 1
fi
work=$image.run
out=${out:-$work/out}
mkdir -p "$out"
copy_checkout "$work/device/project" || exit 1
project=$work/device/project
[[ $(ls -A "$work/device") == project ]] || { say "$work/device must hold the checkout's copy alone"; exit 1; }
say "python3 is $(PATH="$image/bin:$PATH" command -v python3) ($(PATH="$image/bin:$PATH" python3 -c \
    'import sys, torch, transformers; print(sys.version.split()[0], "torch", torch.__version__, "CUDA",
torch.version.cuda, "transformers", transformers.__version__)'))"

failed=0
t0=$SECONDS
run_check "$project" "$out/check.log" --out "$out/check"
status=$? seconds=$((SECONDS - t0))
if ((status == 2)) && grep -q "needs CUDA, but" "$out/check.log" && [[ ! -e $out/check/check.json ]] &&
    grep -q "needs CUDA, but" "$out/check/check.log"; then
    say "check without CUDA: stopped with status 2 in $seconds s, saying why:"
    grep "needs CUDA, but" "$out/check.log" | head -n 1 >&2
else
    say "check without CUDA: status $status in $seconds s, expected 2 and its reason; the end of $out/check.log:"
    tail -n 20 "$out/check.log" >&2; failed=1
fi
t0=$SECONDS
run_check "$project" "$out/rehearsal.log" --rehearse --out "$out/rehearsal"
status=$? seconds=$((SECONDS - t0))
if ((status == 0)) && rehearsal_files "$out/rehearsal"; then
    say "rehearsal: passed in $seconds s (log $out/rehearsal.log, report $out/rehearsal/check.json)"
else
    say "rehearsal: status $status in $seconds s; the end of $out/rehearsal.log:"; failed=1
fi
tail -n 8 "$out/rehearsal.log" >&2
exit $failed
