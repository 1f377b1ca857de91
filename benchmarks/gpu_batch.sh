#!/usr/bin/env bash
# Run benchmark configs at the same time on one lent GPU machine, each under its own name, resumably.
#
#   benchmarks/gpu_batch.sh OUT COMMIT CONFIG[:SEED] ...
#
# OUT gets res/ (the result JSON files), state/ (each run's training state: carry it back to resume a run
# cut off by the call's time limit), logs/ and models/ (what `save = true` configs saved). COMMIT is
# recorded in each result (the machine's copy of the tree may carry an older .git). The data comes from an ignored gpudata/ folder carried with the tree
# (a copy of ../shared/data), linked to ../shared/data there. DEVICE (default cuda) is the device passed
# to benchmarks/run.py --device. Exit status: the number of runs that failed.
set -u
if [ $# -lt 3 ]; then echo "usage: $0 OUT COMMIT CONFIG[:SEED] ..." >&2; exit 2; fi
out=$1; sha=$2; shift 2
mkdir -p ../shared/data "$out/res" "$out/state" "$out/logs"
if [ -d gpudata ]; then for d in gpudata/*; do ln -sfn "$PWD/$d" "../shared/data/$(basename "$d")"; done; fi
export PYTHONPATH=$PWD/src:$PWD/benchmarks ATTNREC_GIT_SHA=$sha
before=$(ls runs 2>/dev/null)
pids=()
for spec in "$@"; do
    cfg=${spec%%:*}; args=(); name=$(basename "$cfg" .toml)
    if [[ $spec == *:* ]]; then args=(--seeds "${spec##*:}"); name=$name-seed${spec##*:}; fi
    python3 benchmarks/run.py --device "${DEVICE:-cuda}" "${args[@]}" --state-dir "$out/state" --out "$out/res" \
        "$cfg" > "$out/logs/$name.log" 2>&1 &
    pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
# models saved by configs with `save = true` land in runs/<name> of this copy of the tree: bring the new ones back
for d in $(ls runs 2>/dev/null); do
    if ! grep -qxF "$d" <<< "$before"; then mkdir -p "$out/models" && cp -r "runs/$d" "$out/models/"; fi
done
exit $failed
