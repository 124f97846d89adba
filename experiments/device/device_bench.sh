#!/usr/bin/env bash
# Runs `make bench` (or another make target) on the lent GPU machine, which has python3.12 + torch but no
# network, as `make <target> OFFLINE=$WHEELHOUSE` (docs/offline-host.md): the wheelhouse's sha256s are
# verified, its wheels installed into $OFFLINE_SITE (once per machine), its G1 assets seeded; results are written
# straight under $OUT/results (so a run cut off by the device's time limit still brings back every finished run).
# Prepare here: `make apply`; `make wheelhouse WHEELHOUSE=.whl` (git-ignored; ASSETS=<.tar.xz> where Hugging
# Face is out of reach); the pristine baseline learner into work/bench/ (.venv/bin/python -c "import sys;
# sys.path.insert(0, 'experiments/bench'); import bench_driver; bench_driver.prepare_baseline(None, None)").
# Carry: .whl overlay/uni_rl overlay/MANIFEST.json work
# Usage (on the device, from the repo root): experiments/device/device_bench.sh [make target] [VAR=value ...];
# extra bench_matrix options go in the environment variable BENCH_ARGS. `device_bench.sh install` only verifies
# and installs the wheelhouse (do it once before starting several invocations in parallel: they then skip it).
# Environment: WHEELHOUSE (.whl), OFFLINE_SITE (/tmp/flashsac-site).
set -euo pipefail
target=${1:-bench}; shift || true
offline=(OFFLINE="${WHEELHOUSE:-.whl}" OFFLINE_SITE="${OFFLINE_SITE:-/tmp/flashsac-site}")
[ "$target" = install ] && exec make --no-print-directory setup "${offline[@]}"
results=${OUT:-$PWD}/results
mkdir -p "$results"
export PYTHONUNBUFFERED=1
# No UNILAB=: the bench and the applier default to the embedded tree work/unilab-<UNILAB_VERSION> (carried).
exec make "$target" "${offline[@]}" PYTHON=python3 \
  BENCH_ARGS="--live-panel never --results-root $results ${BENCH_ARGS:-}" "$@"
