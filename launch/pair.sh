#!/usr/bin/env bash
# Run the target and drafter processes as a pair (installs into .venv on first use).
#   launch/pair.sh [options]          decode prompts with every requested decoder
#   launch/pair.sh sweep [options]    timing sweep over decoders, temperatures and budgets
#   launch/pair.sh --help             all options
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/launch/setup.sh"
# -P: a folder of the caller's named like one of our packages (models/, say) must not shadow it
exec "$root/.venv/bin/python" -P -m launch "$@"
