#!/usr/bin/env bash
# Runs benchmark configs and BERT4Rec studies side by side, one process each, on one machine
# (written for a GPU machine that gets a copy of this tree without ../shared): every process
# shares the one GPU, so each run's timings are those of a shared device and its notes say so.
#
#   bash benchmarks/gpu_batch.sh OUT DATA_DIR "CONFIG..." "STUDY ARGS" ["STUDY ARGS" ...]
#
# DATA_DIR stands in for ../shared/data (the configs' paths). Each "STUDY ARGS" is one
# `benchmarks/studies.py` command line. Result files and logs end up in OUT/results.tgz.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=$1 data=$2 configs=$3; shift 3
if [ ! -e ../shared/data ]; then mkdir -p ../shared && ln -sfn "$(realpath "$data")" ../shared/data; fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
python3 -c "import attnrec, torch; print('attnrec', attnrec.__version__, 'torch', torch.__version__, 'cuda', torch.cuda.is_available())" || exit 1
logs=$(mktemp -d)
pids=()
for c in $configs; do
  python3 benchmarks/run.py --out "$logs/runs" "$c" > "$logs/$(basename "$c" .toml).log" 2>&1 & pids+=($!)
done
i=0
for study in "$@"; do
  i=$((i + 1))
  # shellcheck disable=SC2086 # one study's arguments, split on purpose
  python3 benchmarks/studies.py $study --out "$logs/studies" > "$logs/study-$i.log" 2>&1 & pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
mkdir -p "$out"
tar czf "$out/results.tgz" -C "$logs" .
for f in "$logs"/*.log; do echo "== $(basename "$f")"; tail -n 4 "$f"; done
exit $status
