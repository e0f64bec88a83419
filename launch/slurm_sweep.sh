#!/usr/bin/env bash
# A timing sweep split over a Slurm job array: array task I of N runs shard I/N of the same sweep into one
# directory on a shared file system; when every task has ended, one report merges the shards.
#
#   sbatch --array=0-3 launch/slurm_sweep.sh runs/sweep1 --target MODEL --drafter MODEL --prompts SOURCE ...
#   launch/pair.sh report runs/sweep1            # after the last task: the merged shards' report
#
# The array is numbered as you like (0-3, 1-4, 10-40:10): task k of the array runs shard k/N, counting from
# its lowest index in its steps. Every shard warms up on its own (its process starts cold); the warm-ups are
# recorded apart, and the report leaves them out and says how many it left out.
#
# Submit from the project's folder (Slurm runs a copy of this script; SLURM_SUBMIT_DIR finds the project).
# Each task takes two GPUs (--gpus 0,1 within the GPUs Slurm gave it; SPECPAIR_GPUS=0 for one, empty for
# none). A task that fails or is preempted resumes where it stopped when resubmitted with the same
# index, array size and options; a shard's records are one file, written by one task at a time.
#SBATCH --job-name=specpair-sweep
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
#SBATCH --output=%x-%A_%a.log
set -euo pipefail
out=${1:?usage: sbatch --array=0-N launch/slurm_sweep.sh OUT_DIR [launch/pair.sh sweep options]}
shift
: "${SLURM_ARRAY_TASK_ID:?run this through sbatch --array=0-N}"
first=${SLURM_ARRAY_TASK_MIN:-$SLURM_ARRAY_TASK_ID}
step=${SLURM_ARRAY_TASK_STEP:-1}
count=${SLURM_ARRAY_TASK_COUNT:-$(((${SLURM_ARRAY_TASK_MAX:-$first} - first) / step + 1))}
offset=$((SLURM_ARRAY_TASK_ID - first))
shard=$((offset / step + 1))
if ((offset < 0 || offset % step != 0 || shard > count)); then
    echo "slurm_sweep.sh: array task $SLURM_ARRAY_TASK_ID is not one of $count evenly stepped tasks from $first" \
         "(step $step): submit a range such as --array=0-$((count - 1))" >&2
    exit 2
fi
root=${SLURM_SUBMIT_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
gpus=${SPECPAIR_GPUS-0,1}
exec "$root/launch/pair.sh" sweep ${gpus:+--gpus "$gpus"} --shard "$shard/$count" --out "$out" "$@"
