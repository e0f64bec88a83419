#!/usr/bin/env bash
# The GPU check in one go, offline: environment, the GPU tests, graph/eager parity, per-pass latencies of
# random Llama-3.2-1B and Llama-3.1-8B shapes, a pipelined decode of every decoder, a pipelined pair whose
# drafter is a random EAGLE-3 head of the Llama-3.1-8B head's shapes, and decodes recorded at the paper's pool
# with the values program on them. Everything it prints, from its first line, goes to
# DIR/check.log too; DIR/check.json holds every section's figures as they are measured, so a crash, a hang
# or the end of the time keeps what the finished (and the cut) sections measured.
#
#   tests/gpu/check.sh [--rehearse] [--out DIR] [--timeout S] [--gpus 0|0,1]
#   tests/gpu/check.sh --pack [FOLDER]       copy the wheels a GPU image may lack from FOLDER ($SPECPAIR_WHEELS
#                                            when not given) into .whl/, which then travels with the checkout
#   tests/gpu/check.sh --prepare [--out DIR] only choose and prepare the interpreter, print it
#
# --timeout S: the whole check ends within S seconds, its start-up included (default 510, a window of eight
# and a half minutes; 1100 when rehearsing). The sections share what start-up leaves, each its part of the time still to
# come, so a section that ends early leaves its time to the later ones; a shorter S (--timeout 240) runs
# every section shorter. DIR defaults to runs/gpu-check-TIME.
# --rehearse runs every section on the CPU with tiny shapes (same code, other device and shapes).
# The interpreter is $PYTHON, else .venv/bin/python when its torch is a CUDA build (any torch when
# rehearsing), else python3; its packages are used as they are. Where it cannot import zmq or pytest, those
# missing are installed offline from the wheels folder a user names ($SPECPAIR_WHEELS, else .whl/ in the
# checkout) into a venv that sees the interpreter's own packages ($SPECPAIR_CHECK_VENV, default
# build/check-venv), with the interpreter's pip or, where it has none, by unpacking the wheels; when that
# fails, its log is copied to DIR/install.log.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false

rehearse=0 prepare_only=0 pack=0 pack_from= budget= out= log= args=()
command_line="tests/gpu/check.sh $*"
while (($#)); do
    case $1 in
        --rehearse) rehearse=1; args+=("$1") ;;
        --prepare) prepare_only=1 ;;
        --pack) pack=1; if (($# > 1)) && [[ $2 != -* ]]; then pack_from=$2; shift; fi ;;
        --pack=*) pack=1; pack_from=${1#*=} ;;
        --timeout) budget=${2:?--timeout needs seconds}; shift ;;
        --timeout=*) budget=${1#*=} ;;
        --out) out=${2:?--out needs a folder}; shift ;;
        --out=*) out=${1#*=} ;;
        *) args+=("$1") ;;
    esac
    shift
done

# A line of this script's own, on stderr and in the log once there is one
say() {
    echo "check: $*" >&2
    [[ -z $log ]] || echo "check: $*" >>"$log"
}

# Runs a command, then shows its output on the console and in the log (stdout on stdout, stderr on stderr)
logged() {
    local said status
    said=$(mktemp -d) || return 1
    "$@" >"$said/out" 2>"$said/err"
    status=$?
    cat "$said/out"
    cat "$said/err" >&2
    [[ -z $log ]] || cat "$said/out" "$said/err" >>"$log"
    rm -rf "$said"
    return $status
}

# a CPU rehearsal spends no borrowed device time: it may take longer on a loaded machine
budget=${budget:-$((rehearse ? 1100 : 510))}
[[ $budget =~ ^[1-9][0-9]*$ ]] || { say "--timeout takes whole seconds, got '$budget'"; exit 2; }
PACKED=(pyzmq pytest iniconfig packaging pluggy pygments)  # pyzmq, and pytest with its requirements
GRACE=5  # seconds between the outer timeout's SIGTERM and its SIGKILL, and before it for the report

# DIR/check.log from the first line: the command line, then everything the check prints
start_log() {
    [[ -n $out ]] || out=$root/runs/gpu-$( ((rehearse)) && echo rehearsal || echo check)-$(date +%Y%m%d-%H%M%S)
    mkdir -p "$out" && : >"$out/check.log" || { say "--out: cannot write $out/check.log"; exit 2; }
    log=$out/check.log
    say "$(date -u +%Y-%m-%dT%H:%M:%SZ) $command_line (the whole check within $budget s)"
}

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

# Where wheels are looked for: the folder a user names, then the checkout's packed .whl/
SEARCH=(${SPECPAIR_WHEELS:+"$SPECPAIR_WHEELS"} "$root/.whl")

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

# .whl/: the wheels of PACKED from the folder named by --pack FOLDER or $SPECPAIR_WHEELS
pack() {
    local from=${pack_from:-${SPECPAIR_WHEELS:-}} dest=$root/.whl dist n=0 missing=()
    if [[ -z $from ]]; then
        say "--pack takes the folder that holds the wheels: tests/gpu/check.sh --pack FOLDER (or SPECPAIR_WHEELS=FOLDER)"
        return 2
    fi
    for dist in "${PACKED[@]}"; do
        compgen -G "$from/$dist-*.whl" >/dev/null || missing+=("$dist")
    done
    if ((${#missing[@]})); then
        say "--pack: $from holds no wheel of ${missing[*]} (it needs ${PACKED[*]})"
        return 2
    fi
    mkdir -p "$dest" || return 2
    if [[ $(cd "$from" && pwd) == "$(cd "$dest" && pwd)" ]]; then
        say "--pack: $dest holds the wheels already"; return 0
    fi
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

# What went wrong while preparing $1 (a venv): the log's last lines, and the whole log kept in DIR
install_failed() {
    local install_log=$1.install.log
    say "could not prepare $1; the last lines of $install_log:"
    tail -n 15 "$install_log" >&2
    [[ -z $log ]] && return
    tail -n 15 "$install_log" >>"$log"
    cp -f "$install_log" "$out/install.log" && say "the whole install log: $out/install.log"
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
            "\$SPECPAIR_WHEELS=${SPECPAIR_WHEELS:-unset} and $root/.whl): name a folder that does with" \
            "SPECPAIR_WHEELS=FOLDER, or fill .whl with tests/gpu/check.sh --pack FOLDER where one is"
        return 1
    }
    say "installing ${missing[*]} from $wheels into $venv (offline)"
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    local site install_log=$venv.install.log
    # No pip inside the venv: ensurepip is missing from some system Pythons (Debian's without
    # python3-venv). The interpreter's own pip installs into the venv; without one, the wheels are unpacked.
    "$py" -m venv --system-site-packages --without-pip "$venv" >"$install_log" 2>&1 &&
        site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
        site_pth "$py" >"$site/_check_base_site.pth" || { install_failed "$venv"; return 1; }
    if "$py" -m pip --version >/dev/null 2>&1; then
        offline_pip "$py" "$wheels" --target "$site" "${missing[@]}" >>"$install_log" 2>&1
    else
        "$py" "$root/tests/gpu/unpack_wheels.py" "$wheels" "$site" "${missing[@]}" >>"$install_log" 2>&1
    fi && "$venv/bin/python" -c 'import zmq, pytest' 2>>"$install_log" || { install_failed "$venv"; return 1; }
    echo "$base" >"$venv/.base"
    echo "$venv/bin/python"
}

if ((pack)); then
    pack; exit
fi
if ((!prepare_only)) || [[ -n $out ]]; then start_log; fi
py=$(pick_python)
if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
    say "$py ($(command -v "$py" || echo not found)) cannot import torch and transformers; set PYTHON to the" \
        "interpreter that has them (on the GPU image, its CUDA build of torch)"
    exit 2
fi
if ((!rehearse && !prepare_only)); then  # stop in seconds where CUDA is unusable, saying why
    logged "$py" -P -m models.cuda_env || exit 2
fi
py=$(prepare "$py") || exit 2
if ((prepare_only)); then
    echo "$py"
    exit 0
fi
left=$((budget - SECONDS))
if ((left - 2 * GRACE < 10)); then
    say "start-up took $SECONDS of the $budget s: too little is left for the sections (--timeout)"
    exit 124
fi
# check.py keeps to its time itself and ends GRACE s before the outer timeout, which catches a hang it cannot
# interrupt: SIGTERM (the report is completed), then SIGKILL GRACE s later, at the end of the window
timeout -k $GRACE $((left - GRACE)) "$py" -P -m tests.gpu.check --timeout $((left - 2 * GRACE)) --out "$out" "${args[@]}"
status=$?
((status == 124 || status == 137)) && ((SECONDS >= budget - GRACE)) && say "stopped by the overall timeout (${budget} s)"
exit $status
