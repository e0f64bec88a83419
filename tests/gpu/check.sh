#!/usr/bin/env bash
# The GPU check in one go, offline: environment, the GPU tests, graph/eager parity, per-pass latencies of
# random Llama-3.2-1B and Llama-3.1-8B shapes, and a pipelined decode of every decoder. About six
# minutes on one H200; DIR/check.json is written after every section, DIR/check.log holds the whole output,
# and the output ends with one line per section.
#
#   tests/gpu/check.sh [--rehearse] [--out DIR] [--timeout S] [--gpus 0|0,1]
#   tests/gpu/check.sh --pack         beside ../shared: copy the wheels a GPU image may lack into .whl/
#   tests/gpu/check.sh --prepare      only choose and prepare the interpreter, print it
#
# --rehearse runs every section on the CPU with tiny shapes (same code, other device and shapes).
# The interpreter is $PYTHON, else .venv/bin/python when its torch is a CUDA build (any torch when
# rehearsing), else python3; its packages are used as they are. Where it cannot import zmq or pytest,
# those missing are installed offline from the first wheels folder that has them ($SPECPAIR_WHEELS, .whl,
# ../shared/wheels, shared/wheels) into a venv that sees the interpreter's own packages
# ($SPECPAIR_CHECK_VENV, default build/check-venv), with the interpreter's pip or, where it has none, by
# unpacking the wheels. A checkout that travels without ../shared brings .whl (git-ignored), made by --pack.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

rehearse=0 prepare_only=0 pack=0 budget= args=()
while (($#)); do
    case $1 in
        --rehearse) rehearse=1; args+=("$1") ;;
        --prepare) prepare_only=1 ;;
        --pack) pack=1 ;;
        --timeout) budget=${2:?--timeout needs seconds}; shift ;;
        --timeout=*) budget=${1#*=} ;;
        *) args+=("$1") ;;
    esac
    shift
done

say() { echo "check: $*" >&2; }
# a CPU rehearsal spends no borrowed device time: it may take longer on a loaded machine
budget=${budget:-$((rehearse ? 900 : 480))}
[[ $budget =~ ^[1-9][0-9]*$ ]] || { say "--timeout takes whole seconds, got '$budget'"; exit 2; }
PACKED=(pyzmq pytest iniconfig packaging pluggy pygments)  # pyzmq, and pytest with its requirements

pick_python() {
    if [[ -n ${PYTHON:-} ]]; then echo "$PYTHON"; return; fi
    local venv=$root/.venv/bin/python
    if [[ -x $venv ]]; then
        local want='import sys, torch; sys.exit(torch.version.cuda is None)'
        ((rehearse)) && want='import torch'
        if "$venv" -c "$want" 2>/dev/null; then echo "$venv"; return; fi
    fi
    echo python3
}

# Where wheels are looked for, and where --pack copies them from
SEARCH=(${SPECPAIR_WHEELS:+"$SPECPAIR_WHEELS"} "$root/.whl" "$root/../shared/wheels" "$root/shared/wheels")
SOURCES=(${SPECPAIR_WHEELS:+"$SPECPAIR_WHEELS"} "$root/../shared/wheels" "$root/shared/wheels")

# The first folder of the array named $1 that holds a wheel of every distribution named after it
first_with() {
    local -n folders=$1
    local dir dist
    shift
    for dir in "${folders[@]}"; do
        for dist in "$@"; do
            compgen -G "$dir/$dist-*.whl" >/dev/null || continue 2
        done
        (cd "$dir" && pwd); return 0
    done
    return 1
}

# .whl/: the wheels of PACKED from a wheels folder, for a checkout that travels without ../shared
pack() {
    local from dest=$root/.whl dist n=0
    from=$(first_with SOURCES "${PACKED[@]}") || {
        say "--pack: no wheels folder holds ${PACKED[*]} (looked in ${SOURCES[*]})"
        return 2
    }
    mkdir -p "$dest" || return 2
    for dist in "${PACKED[@]}"; do
        cp -f "$from/$dist"-*.whl "$dest/" || return 2
        n=$((n + $(compgen -G "$from/$dist-*.whl" | wc -l)))
    done
    say "packed $n wheels ($(du -sh "$dest" | cut -f1)) from $from into $dest (git-ignored): bring it with the" \
        "checkout"
}

# The site-packages folders the interpreter $1 sees, as a .pth file: a venv made from a venv'd Python
# (the GPU image's is one) would otherwise see only the base Python's packages, not torch.
site_pth() {
    "$1" - <<'EOF'
import os, sys
for p in sys.path:
    if os.path.basename(p) in ("site-packages", "dist-packages") and os.path.isdir(p):
        print(f"import site; site.addsitedir({p!r})")
EOF
}

# pip, offline and blind to this machine's pip configuration (indexes, constraints, find-links)
offline_pip() {
    local py=$1 wheels=$2; shift 2
    PIP_CONFIG_FILE=/dev/null "$py" -m pip --isolated --disable-pip-version-check --no-input install \
        --no-index --find-links "$wheels" --only-binary :all: --no-cache-dir --no-warn-script-location "$@"
}

# Prints the interpreter to run with: $1 itself when it has zmq and pytest, else a prepared venv.
prepare() {
    local py=$1 missing=()
    "$py" -c 'import zmq' 2>/dev/null || missing+=(pyzmq)
    "$py" -c 'import pytest' 2>/dev/null || missing+=(pytest)
    if ((${#missing[@]} == 0)); then echo "$py"; return 0; fi
    local venv=${SPECPAIR_CHECK_VENV:-$root/build/check-venv} base wheels
    base=$("$py" -c 'import sys; print(sys.executable)')
    if [[ -x $venv/bin/python && $(cat "$venv/.base" 2>/dev/null) == "$base" ]] &&
        "$venv/bin/python" -c 'import zmq, pytest' 2>/dev/null; then
        echo "$venv/bin/python"; return 0
    fi
    wheels=$(first_with SEARCH "${missing[@]}") || {
        say "$base cannot import ${missing[*]}, and no wheels folder holds ${missing[*]} (looked in" \
            "\$SPECPAIR_WHEELS=${SPECPAIR_WHEELS:-unset}, ${SEARCH[*]: -3}; tests/gpu/check.sh --pack, run beside" \
            "../shared, fills .whl)"
        return 1
    }
    say "installing ${missing[*]} from $wheels into $venv (offline)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    local site log=$venv.install.log
    # No pip inside the venv: ensurepip is missing from some system Pythons (Debian's without
    # python3-venv). The interpreter's own pip installs into the venv; without one, the wheels are unpacked.
    "$py" -m venv --system-site-packages --without-pip "$venv" >"$log" 2>&1 &&
        site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
        site_pth "$py" >"$site/_check_base_site.pth" || { say "cannot make a venv with $base; see $log"; return 1; }
    if "$py" -m pip --version >/dev/null 2>&1; then
        offline_pip "$py" "$wheels" --target "$site" "${missing[@]}" >>"$log" 2>&1
    else
        "$py" "$root/tests/gpu/unpack_wheels.py" "$wheels" "$site" "${missing[@]}" >>"$log" 2>&1
    fi
    if ! "$venv/bin/python" -c 'import zmq, pytest' 2>>"$log"; then
        say "could not prepare $venv; the last lines of $log:"
        tail -n 15 "$log" >&2
        return 1
    fi
    echo "$base" >"$venv/.base"
    echo "$venv/bin/python"
}

if ((pack)); then
    pack; exit
fi
py=$(pick_python)
if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
    say "$py ($(command -v "$py" || echo not found)) cannot import torch and transformers; set PYTHON to the" \
        "interpreter that has them (on the GPU image, its CUDA build of torch)"
    exit 2
fi
if ((!rehearse && !prepare_only)); then  # stop in seconds where CUDA is unusable, saying why
    "$py" -P -m models.cuda_env || exit 2
fi
py=$(prepare "$py") || exit 2
if ((prepare_only)); then
    echo "$py"
    exit 0
fi
left=$((budget - SECONDS))
# check.py keeps to the budget itself; the outer timeout catches a hang it cannot interrupt
timeout -k 10 $((left + 30)) "$py" -P -m tests.gpu.check --timeout "$left" "${args[@]}"
status=$?
((status == 124 || status == 137)) && ((SECONDS >= budget)) && say "stopped by the overall timeout (${budget} s)"
exit $status
