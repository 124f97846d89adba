#!/usr/bin/env bash
# Where the collector's time goes, on the lent two-GPU machine (nvidia-h200-x2), in one device call: one real
# training run per setting (report, unilab-default), each on its own GPU and pinned to its own 16 cores
# (taskset), recorded with py-spy (all processes: learner and collector) in raw (collapsed-stack) format.
# Profiled runs are for *where* time goes, not for speed figures (sampling costs a little); their run JSONs
# are kept beside the profiles. Everything is packed into $OUT/profile.tgz (the device returns few files).
# Carry as for device_bench.sh (.whl, overlay/uni_rl, overlay/MANIFEST.json, work); the wheelhouse brings py-spy.
# Environment: ITERATIONS (300), CONFIG (patched-default), RATE (py-spy samples/s, 100), BUDGET_S (540).
set -uo pipefail
work=/tmp/profile
rm -rf "$work" && mkdir -p "$work"
trap 'tar czf "$OUT/profile.tgz" -C "$work" .' EXIT
bash experiments/device/device_bench.sh install || exit 1
site=${OFFLINE_SITE:-/tmp/flashsac-site}
assets=$(echo "${WHEELHOUSE:-.whl}"/assets/*.tar.xz)
export PYTHONPATH=$site MUJOCO_GL=disable HF_HUB_OFFLINE=1 WANDB_MODE=disabled PYTHONUNBUFFERED=1
{ date -u; nproc; lscpu | head -20; nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; } \
  >"$work/machine.txt" 2>&1
tree=$(python3 experiments/bench/bench_env.py path unilab-tree) || exit 1
python3 -c "import sys; from pathlib import Path; sys.path.insert(0, 'experiments/bench'); import bench_env; \
print(bench_env.ensure_assets(Path('$tree').resolve(), Path('$assets')))" || exit 1
spy=$site/bin/py-spy
for gpu_setting in 0:report 1:unilab-default; do
  gpu=${gpu_setting%%:*} setting=${gpu_setting##*:}
  cores=$((gpu * 16))-$((gpu * 16 + 15))
  (CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "${BUDGET_S:-540}" taskset -c "$cores" \
     "$spy" record --subprocesses --nonblocking --format raw --rate "${RATE:-100}" -o "$work/$setting.collapsed" -- \
     python3 experiments/bench/benchmark_flashsac_training.py --unilab-root "$tree" --setting "$setting" \
       --config "${CONFIG:-patched-default}" --iterations "${ITERATIONS:-300}" --summary-last 150 \
       --live-panel never --output "$work/$setting.json" >"$work/$setting.log" 2>&1
   echo "exit $?" >>"$work/$setting.log") &
done
wait
