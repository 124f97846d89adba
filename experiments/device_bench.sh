#!/usr/bin/env bash
# Runs `make bench` (or another make target) on the lent GPU machine, which has python3.12 + torch but no
# network: installs the carried wheel set (.whl/, from ../shared/device/fetch-wheels.sh) into /tmp/site,
# seeds the G1 assets from .assets/, and writes results straight under $OUT/results (so a run cut off by
# the device's time limit still brings back every finished run).
# Prepare here: `make apply`; the wheel set into .whl/; the G1 assets .tar.xz into .assets/; the pristine
# baseline learner into work/bench/ (.venv/bin/python -c "import sys; sys.path.insert(0, 'experiments');
# import bench_driver; bench_driver.prepare_baseline(None, None)").
# Carry: .whl .assets overlay/uni_rl overlay/MANIFEST.json work
# Usage (on the device, from the repo root): experiments/device_bench.sh [make target] [VAR=value ...];
# extra bench_matrix options go in the environment variable BENCH_ARGS. `device_bench.sh install` only installs
# the wheels (do it once before starting several invocations in parallel: they then skip the install).
set -euo pipefail
target=${1:-bench}; shift || true
if [ ! -f /tmp/site/.wheels-installed ]; then
  python3 -m pip install -q --upgrade --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
  touch /tmp/site/.wheels-installed
fi
[ "$target" = install ] && exit 0
export PYTHONPATH=/tmp/site MUJOCO_GL=disable HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1
results=${OUT:-$PWD}/results
mkdir -p "$results"
exec make "$target" PYTHON=python3 UNILAB="$PWD/work/unilab-1.3.2" \
  UNILAB_ASSETS="$PWD/.assets/unilab-1.3.2-g1-assets.tar.xz" \
  BENCH_ARGS="--live-panel never --results-root $results ${BENCH_ARGS:-}" "$@"
