#!/usr/bin/env bash
# The GPU evidence that docs/ and results/ cite, on the lent two-GPU machine (nvidia-h200-x2), in one device call:
# `device_evidence.sh MODE...` runs the given modes concurrently. The device returns at most 8 files, so
# everything lands in $EVIDENCE_DIR (/tmp/evidence/) and is packed into $OUT/<its name>.tgz on exit; each part
# stops at BUDGET_S (default 540 s) so the packing happens inside the call's 600 s limit, and every finished run is
# in the archive even when a later one was cut off.
#
#   checks  validate_numerics.py --mode gpu on GPU $NUMERICS_GPU (0) and validate_replay_stability.py, one
#           process per graph path, on GPU $REPLAY_GPU (0): correctness, not timing, so they share GPUs.
#   parity  `make bench-parity` on GPU $PARITY_GPU (1), one invocation per arm and seed (PARITY_ARMS, SEEDS),
#           all concurrently, of PARITY_TASK (g1_walk_flat; e.g. go2_joystick_flat: its CPU MuJoCo owner) at
#           PARITY_SETTING (report; unilab-default: the task's own config): learning curves, not timing;
#           `bench_parity.py --report DIR` merges them afterwards.
#   ttr     time to reward: one `make bench-parity` run per arm of TTR_ARMS (seed TTR_SEED), concurrently on
#           GPU $PARITY_GPU, each pinned to its own block of CORES_PER_RUN (5) cores: the runs' wall clocks are
#           those of a 5-core machine each (experiments/evidence/time_to_reward.py reads them); TTR_SETTING
#           (report; unilab-default: the tree's task config) is the setting every arm trains at. Run it alone.
#   bench   `make bench` with one schedule per GPU, each alternating over every configuration: the ratios
#           of a table row come from runs made side by side on one GPU. Run it alone.
#   pinned  collector figures (CPU-bound): `make bench` per GPU, each pinned to its own block of CORES_PER_GPU
#           (16) cores with taskset, so two invocations never share a core; GPU0_PLAN and GPU1_PLAN are the
#           make variables of each (e.g. 'SETTING=report SCHEDULES=2 CONFIGS=baseline-1.3.2,patched-default');
#           GPUn_CHECKS=1 runs validate_numerics.py --mode gpu after that GPU's bench, on its cores. Run it alone.
#   collectors  the collectors side by side: `make bench SIM=mujoco,mjwarp COLLECTOR=host,device` (CPU MuJoCo,
#           host-env MJWarp and the device-resident collector on MJWarp, alternating) for COLLECTOR_CONFIGS
#           (patched-default) at COLLECTOR_SETTINGS (report unilab-default; the report's at 2/1/1), ITERATIONS
#           (1000), SUMMARY_LAST (500). COLLECTOR_GPUS (0): one GPU runs every setting in one invocation; one GPU
#           per setting (e.g. "0 1" on nvidia-h200-x2) runs each setting's invocation on its own GPU and its own
#           block of CORES_PER_GPU (16) cores, concurrently. COLLECTOR_SIMS (mujoco,mjwarp), COLLECTORS (all; e.g. device) and SCHEDULES (2: the 2/1/1 schedule)
#           trim a call that must fit the device's time limit; COLLECTOR_TASK (g1_walk_flat; e.g. go2_joystick_flat)
#           names the task. Run it alone.
#   sim2sim-train  sim-to-sim training: seeds SEEDS (1 2 3 4 5) × SIM2SIM_ARMS (mujoco mjwarp: CPU MuJoCo and
#           MJWarp with the host collector; mjwarp-device: MJWarp with the device-resident collector) of
#           SIM2SIM_TASK (g1_walk_flat; SIM2SIM_SYNTHETIC_CLIP=1: a motion task's synthetic clip where the tree
#           has none) at SIM2SIM_SETTING (report; unilab-default: the task's own config) with
#           each of SIM2SIM_CONFIGS (patched-default; add negative-control-lr10 for the parity test's control),
#           SIM2SIM_ITERATIONS (3000) each, all concurrently on GPU 0 (learning, not timing); run dirs and
#           checkpoints stay in $SIM2SIM_DIR (/tmp/sim2sim) on the machine, the run JSONs come back.
#   sim2sim-eval   a later call on the same (warm) machine: each checkpoint of $SIM2SIM_DIR evaluated on CPU
#           MuJoCo (experiments/evidence/policy_eval.py, EVAL_STEPS (1000) steps × 256 envs, evaluation seed 1), all
#           concurrently, each on its own core with one math thread; `policy_eval_report.py <folder of the eval JSONs>`
#           writes the README.
#   preemption  experiments/evidence/preemption_matrix.py from the tree root, one invocation per setting of
#           PREEMPTION_SETTINGS (report unilab-default), concurrently on GPU 0, each running PREEMPTION_JOBS (4) cases
#           side by side; the signal comes after PREEMPTION_AFTER_<setting> iterations (report 200,
#           unilab-default 20) and a resumed run ends at twice that; PREEMPTION_FAULTS (all) names some of the
#           matrix's faults (e.g. resume). Results in $work/preemption-<setting>/ (checkpoints stay on the machine).
#   start   a fresh machine's start, side by side: for START_ROUNDS (2) rounds, alternating, each config of
#           START_CONFIGS (patched-default compile-behind) at each setting of START_SETTINGS (report) on START_SIM
#           (mjwarp) with START_COLLECTOR (device; mujoco needs host, as baseline-1.3.2 does), START_ITERATIONS
#           (1000) each, one after another on GPU 0, every run with empty Inductor, Triton, compile-artifact, torch
#           extension, Warp kernel and CUDA driver caches; START_WARP_KERNELS=1 seeds
#           each run's Warp kernel cache from the wheelhouse's warp-kernels/ (what `make setup OFFLINE=` puts into
#           a host's cache). The run JSONs (launch to first iteration, the swap's record, wall per iteration) in
#           $work/start/.
#   kernel-build  where MuJoCo Warp's kernel modules are built as a G1 Walk Flat env starts, with an empty Warp
#           kernel cache each time: experiments/evidence/mjwarp_kernel_build.py for KB_ROUNDS (2) rounds,
#           alternating over KB_WORKERS (0 auto: Warp's build at launch, the default, then one build worker per
#           usable CPU), KB_NUM_ENVS (256) worlds, one after another on GPU 0. JSONs in $work/kernel-build/.
#   env-graph  the device env's CUDA graphs (experiments/evidence/device_env_graph_check.py) from the tree root,
#           one after another on GPU 0 at ENV_GRAPH_ENVS (256) envs: the step's memory and its control
#           (--shared-pool), the draws taken ahead and their control (--offset-shifted), the reset's conditional
#           node and its controls (--condition-unset, --every-step), a failed capture and its control
#           (--leave-open), the step's timestamps of its parts in the replayed graph and their control
#           (--misplaced-stamp); then a failed capture of the learner's graphed inference and its control
#           (experiments/evidence/capture_failure_check.py [--leave-open]). JSONs in $work/env-graph/.
#   learner-profile  the learner's kernels per iteration by kind and the largest
#           (experiments/evidence/learner_kernel_profile.py) from the tree root, one after another on GPU 0: each
#           setting of LP_SETTINGS (unilab-default report; the report's at 2/1/1) on the whole-iteration graph,
#           on it with the products on their own widths (--no-aligned-products: the learner without them),
#           without Inductor's combo kernels (--no-combo-kernels: the learner without them), then on the
#           per-update path. JSONs in $work/learner-profile/.
#   capture-probe  which part of a device env's step fails to record as a CUDA graph
#           (experiments/evidence/device_capture_probe.py) from the tree root on GPU 0, for each task of PROBE_TASKS
#           (go2_joystick_flat g1_motion_tracking) one after another, every part in its own process; each task's
#           assets are seeded first (UNILAB_ASSETS, else the wheelhouse's archives; motion tracking's synthetic
#           clip where the tree has none). JSONs and each task's lines in $work/capture-probe/.
#
# Prepare and carry as for device_bench.sh (.whl overlay/uni_rl overlay/MANIFEST.json work), and
# .compile-cache (git-ignored) to start from an earlier call's compile artifacts.
# Environment: BUDGET_S; EVIDENCE_DIR (/tmp/evidence; cleared at the start, so only a folder an earlier
# invocation made or a new one); checks: REPLAY_ITERATIONS (1000); parity: SEEDS (1 2 3 4 5), PARITY_ARMS
# (bench_parity.py's default arms), PARITY_ITERATIONS (3000); ttr: TTR_ARMS, TTR_SEED (1), CORES_PER_RUN (5);
# bench: ITERATIONS (300), SUMMARY_LAST (150), CONFIGS, CHECKS_JSON (the checks' results, embedded in runs).
set -uo pipefail
modes='checks|parity|ttr|bench|pinned|collectors|sim2sim-train|sim2sim-eval|preemption|start|kernel-build|env-graph|learner-profile|capture-probe'
[ $# -gt 0 ] || { echo "usage: device_evidence.sh $modes ..." >&2
                  exit 2; }
budget=${BUDGET_S:-540}
work=${EVIDENCE_DIR:-/tmp/evidence}  # its own folder lets a detached invocation run beside another
# The folder is cleared: one that holds anything but an earlier invocation's results is left alone.
if [ -e "$work" ] && [ ! -f "$work/.device-evidence" ]; then
  echo "device_evidence.sh: $work exists and is not an earlier invocation's folder; name a new EVIDENCE_DIR" >&2
  exit 2
fi
rm -rf "$work" && mkdir -p "$work" && touch "$work/.device-evidence"
# Checkpoints stay on the machine (the preemption matrix writes GBs of them; the device returns 16 MiB a file).
trap 'tar czf "$OUT/$(basename "$work").tgz" --exclude="*.pt" -C "$work" .' EXIT
bash experiments/device/device_bench.sh install || exit 1
export PYTHONPATH=${OFFLINE_SITE:-/tmp/flashsac-site} MUJOCO_GL=disable HF_HUB_OFFLINE=1 WANDB_MODE=disabled \
  PYTHONUNBUFFERED=1
# The warm-up's compile artifacts (uni_rl 0008) go into the archive; a carried .compile-cache/ (an earlier
# call's, same GPU and torch) is loaded first, as a user copies them to a new machine.
export FLASHSAC_COMPILE_CACHE_DIR=$work/compile-cache
mkdir -p "$FLASHSAC_COMPILE_CACHE_DIR"
[ -d .compile-cache ] && cp .compile-cache/* "$FLASHSAC_COMPILE_CACHE_DIR"/ 2>/dev/null
assets=$(ls "${WHEELHOUSE:-.whl}"/assets/*.tar.xz | paste -sd:)
{ date -u; nproc; nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'; } \
  >"$work/machine.txt" 2>&1
# Seed the task's assets (and a synthetic motion clip, where asked) once, before parallel invocations would each try to.
tree=$(python3 experiments/bench/bench_env.py path unilab-tree) && tree=$(cd "$tree" && pwd) || exit 1
baseline=$(python3 experiments/bench/bench_env.py path baseline-uni-rl) || exit 1
sim2sim=${SIM2SIM_DIR:-/tmp/sim2sim}
python3 -c "import sys; from pathlib import Path; sys.path.insert(0, 'experiments/bench'); import bench_env; \
print(bench_env.ensure_assets(Path('$tree').resolve(), '$assets', '${SIM2SIM_TASK:-${PARITY_TASK:-g1_walk_flat}}', \
synthetic_clip=bool('${SIM2SIM_SYNTHETIC_CLIP:-}')))" || exit 1

on_gpu() {  # on_gpu <gpu> <log name> <command...>: run in the background, bounded by the budget
  local gpu=$1 log=$2; shift 2
  (CUDA_VISIBLE_DEVICES=$gpu timeout -s INT -k 15 "$budget" "$@" >"$work/$log.log" 2>&1
   echo "exit $?" >>"$work/$log.log") &
}

for mode in "$@"; do
  case $mode in
    checks)
      on_gpu "${NUMERICS_GPU:-0}" numerics python3 experiments/evidence/validate_numerics.py --mode gpu \
        --baseline-root "$baseline" --patched-root overlay --output "$work/validate_numerics_gpu.json"
      paths=$(python3 experiments/bench/bench_configs.py list replay-paths) || exit 1
      for path in ${paths//,/ }; do
        on_gpu "${REPLAY_GPU:-0}" "replay-$path" python3 experiments/evidence/validate_replay_stability.py \
          --patched-root overlay --paths "$path" --iterations "${REPLAY_ITERATIONS:-1000}" \
          --output "$work/replay-$path.json"
      done
      ;;
    parity)
      # The references' pristine tree and baseline learner, and the task's assets in it, once before the concurrent
      # runs: each run would otherwise make them itself, one removing the tree another has just made.
      PATCHSET_CACHE="${WHEELHOUSE:-.whl}/pinned" python3 -c "import sys; sys.path.insert(0, 'experiments/bench'); \
import bench_driver, bench_env; bench_driver.prepare_baseline(None, None); \
print(bench_env.ensure_assets(bench_driver.prepare_pristine_tree(), '$assets', '${PARITY_TASK:-g1_walk_flat}'))" \
        >"$work/parity-setup.log" 2>&1 || { echo "device_evidence.sh parity: the pristine tree or the baseline" \
        "learner could not be made: $(tail -1 "$work/parity-setup.log")" >&2; exit 1; }
      for seed in ${SEEDS:-1 2 3 4 5}; do
        arms=${PARITY_ARMS:-$(python3 experiments/bench/bench_parity.py --list-arms)} || exit 1
        for arm in ${arms//,/ }; do
          on_gpu "${PARITY_GPU:-0}" "parity-$arm-seed$seed" bash experiments/device/device_bench.sh bench-parity \
            SEEDS="$seed" ITERATIONS="${PARITY_ITERATIONS:-3000}" TASK="${PARITY_TASK:-g1_walk_flat}" \
            SETTING="${PARITY_SETTING:-report}" \
            BENCH_ARGS="--arms $arm --results-root $work/parity-$arm-seed$seed"
        done
      done
      ;;
    ttr)
      per=${CORES_PER_RUN:-5} index=0
      arms=${TTR_ARMS:-$(python3 experiments/evidence/time_to_reward.py --list-arms)} || exit 1
      for arm in ${arms//,/ }; do
        cores=$((index * per))-$((index * per + per - 1)) index=$((index + 1))
        on_gpu "${PARITY_GPU:-0}" "ttr-$arm" taskset -c "$cores" bash experiments/device/device_bench.sh bench-parity \
          SEEDS="${TTR_SEED:-1}" ITERATIONS="${PARITY_ITERATIONS:-3000}" \
          BENCH_ARGS="--arms $arm --setting ${TTR_SETTING:-report} --results-root $work/ttr-$arm"
      done
      ;;
    bench)
      configs=${CONFIGS:-$(python3 experiments/bench/bench_configs.py list evidence)} || exit 1
      for gpu_schedule in 0:2 1:8; do
        on_gpu "${gpu_schedule%%:*}" "bench-schedule${gpu_schedule##*:}" bash experiments/device/device_bench.sh bench \
          SCHEDULES="${gpu_schedule##*:}" CONFIGS="$configs" ITERATIONS="${ITERATIONS:-300}" \
          SUMMARY_LAST="${SUMMARY_LAST:-150}" TIMEOUT_S=300 NO_CHECKS=1 ${CHECKS_JSON:+CHECKS_JSON=$CHECKS_JSON} \
          BENCH_ARGS="--results-root $work/schedule${gpu_schedule##*:}"
      done
      ;;
    pinned)
      per=${CORES_PER_GPU:-16}
      for gpu in 0 1; do
        plan_var=GPU${gpu}_PLAN
        [ -n "${!plan_var:-}" ] || continue
        checks_var=GPU${gpu}_CHECKS
        cores=$((gpu * per))-$((gpu * per + per - 1))
        # shellcheck disable=SC2086  # the plan is a list of make variables
        on_gpu "$gpu" "pinned-gpu$gpu" bash -c "taskset -c $cores bash experiments/device/device_bench.sh bench \
          ${!plan_var} ITERATIONS=${ITERATIONS:-1000} SUMMARY_LAST=${SUMMARY_LAST:-500} NO_CHECKS=1 \
          BENCH_ARGS='--results-root $work/gpu$gpu'; echo \"bench exit \$?\"
          if [ -n '${!checks_var:-}' ]; then taskset -c $cores python3 experiments/evidence/validate_numerics.py --mode gpu \
            --baseline-root $baseline --patched-root overlay \
            --output $work/validate_numerics_gpu.json; fi"
      done
      ;;
    collectors)
      collectors=${COLLECTORS:-$(python3 experiments/bench/bench_configs.py list collectors)} || exit 1
      settings=(${COLLECTOR_SETTINGS:-report unilab-default}) gpus=(${COLLECTOR_GPUS:-0}) per=${CORES_PER_GPU:-16}
      plan="TASK=${COLLECTOR_TASK:-g1_walk_flat} SIM=${COLLECTOR_SIMS:-mujoco,mjwarp} COLLECTOR=$collectors \
        CONFIGS=${COLLECTOR_CONFIGS:-patched-default} SCHEDULES=${SCHEDULES:-2} \
        ITERATIONS=${ITERATIONS:-1000} SUMMARY_LAST=${SUMMARY_LAST:-500} TIMEOUT_S=${TIMEOUT_S:-300} NO_CHECKS=1"
      if [ ${#gpus[@]} -eq 1 ]; then
        all=$(IFS=,; echo "${settings[*]}")
        # shellcheck disable=SC2086  # the plan is a list of make variables
        on_gpu "${gpus[0]}" collectors bash experiments/device/device_bench.sh bench SETTING="$all" $plan \
          BENCH_ARGS="--results-root $work/collectors"
      elif [ ${#gpus[@]} -eq ${#settings[@]} ]; then
        for index in "${!settings[@]}"; do
          gpu=${gpus[$index]} setting=${settings[$index]} cores=$((index * per))-$((index * per + per - 1))
          # shellcheck disable=SC2086
          on_gpu "$gpu" "collectors-$setting" taskset -c "$cores" bash experiments/device/device_bench.sh bench \
            SETTING="$setting" $plan BENCH_ARGS="--results-root $work/collectors-$setting"
        done
      else
        echo "device_evidence.sh collectors: COLLECTOR_GPUS names one GPU or one per setting" >&2; exit 2
      fi
      ;;
    sim2sim-train)
      mkdir -p "$work/sim2sim-runs"
      for arm in ${SIM2SIM_ARMS:-mujoco mjwarp}; do
        collector=host
        [ "$arm" = mjwarp-device ] && collector=device
        for config in ${SIM2SIM_CONFIGS:-patched-default}; do
          name=$arm  # a run of another configuration is named for it too
          [ "$config" = patched-default ] || name=$arm-$config
          for seed in ${SEEDS:-1 2 3 4 5}; do
            on_gpu 0 "train-$name-seed$seed" python3 experiments/bench/benchmark_flashsac_training.py \
              --unilab-root "$tree" --task "${SIM2SIM_TASK:-g1_walk_flat}" --setting "${SIM2SIM_SETTING:-report}" \
              --config "$config" --backend "${arm%-device}" --collector "$collector" --seed "$seed" \
              --iterations "${SIM2SIM_ITERATIONS:-3000}" --live-panel never ${SIM2SIM_SYNTHETIC_CLIP:+--synthetic-motion-clip} \
              --run-dir "$sim2sim/$name-seed$seed" --output "$sim2sim/$name-seed$seed.json"
          done
        done
      done
      wait
      cp "$sim2sim"/*.json "$work/sim2sim-runs/"
      ;;
    sim2sim-eval)
      mkdir -p "$work/sim2sim-eval"
      cores=$(nproc) index=0
      for run in "$sim2sim"/*/; do
        name=$(basename "$run")
        checkpoint=$(find "$run" -name 'model_*.pt' | sort -V | tail -1)
        [ -n "$checkpoint" ] || { echo "sim2sim-eval: no checkpoint under $run" >&2; continue; }
        # CPU only (no GPU visible), from the tree root with the overlay first, as experiments/evidence/policy_eval.py says.
        # One core and one math thread each: ten evaluations left to their default thread pools on 16 cores
        # oversubscribed them so far that none finished in 300 s; pinned, each takes about 100 s.
        on_gpu "" "eval-$name" env OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c $((index % cores)) bash -c \
          "cd '$tree' && PYTHONPATH='$PWD/overlay:$tree/src:$PYTHONPATH' \
          python3 '$PWD/experiments/evidence/policy_eval.py' --task '${SIM2SIM_TASK:-g1_walk_flat}/mujoco' --checkpoint '$checkpoint' --training-run '$sim2sim/$name.json' \
          --num-envs 256 --steps ${EVAL_STEPS:-1000} --seeds 1 --label '$name' \
          --output '$work/sim2sim-eval/$name.json'"
        index=$((index + 1))
      done
      ;;
    preemption)
      for setting in ${PREEMPTION_SETTINGS:-report unilab-default}; do
        after_var=PREEMPTION_AFTER_${setting//-/_} after=20
        [ "$setting" = report ] && after=200
        after=${!after_var:-$after}
        on_gpu 0 "preemption-$setting" bash -c "cd '$tree' && PYTHONPATH='$PWD/overlay:$tree/src:$PYTHONPATH' \
          python3 '$PWD/experiments/evidence/preemption_matrix.py' --out '$work/preemption-$setting' \
          --settings $setting --signal-after $after --iterations $((2 * after)) --jobs ${PREEMPTION_JOBS:-4} \
          ${PREEMPTION_FAULTS:+--faults $PREEMPTION_FAULTS}"
      done
      ;;
    start)
      mkdir -p "$work/start"
      configs=(${START_CONFIGS:-patched-default compile-behind})
      runs=()
      for round in $(seq 1 "${START_ROUNDS:-2}"); do
        order=("${configs[@]}")
        [ $((round % 2)) -eq 0 ] && order=($(printf '%s\n' "${configs[@]}" | tac))
        for setting in ${START_SETTINGS:-report}; do
          for config in "${order[@]}"; do runs+=("$round $setting $config"); done
        done
      done
      on_gpu 0 start bash -c 'for run in "$@"; do
          read -r round setting config <<<"$run"
          caches=$(mktemp -d)
          [ "'"${START_WARP_KERNELS:-0}"'" = 1 ] && mkdir -p $caches/warp && cp -r .whl/warp-kernels/. $caches/warp/
          TORCHINDUCTOR_CACHE_DIR=$caches/inductor TRITON_CACHE_DIR=$caches/triton WARP_CACHE_PATH=$caches/warp \
            CUDA_CACHE_PATH=$caches/nv TORCH_EXTENSIONS_DIR=$caches/ext \
            FLASHSAC_COMPILE_CACHE_DIR=$caches/artifacts python3 experiments/bench/benchmark_flashsac_training.py \
            --unilab-root "'"$tree"'" --setting "$setting" --config "$config" \
            --backend "'"${START_SIM:-mjwarp}"'" --collector "'"${START_COLLECTOR:-device}"'" \
            --iterations "'"${START_ITERATIONS:-1000}"'" --live-panel never --run-dir "$caches/run" \
            --output "'"$work"'/start/$setting-$config-round$round.json"; echo "$run: exit $?"
          rm -rf "$caches"
        done' start "${runs[@]}"
      ;;
    kernel-build)
      mkdir -p "$work/kernel-build"
      runs=()
      for round in $(seq 1 "${KB_ROUNDS:-2}"); do
        order=(${KB_WORKERS:-0 auto})
        [ $((round % 2)) -eq 0 ] && order=($(printf '%s\n' "${order[@]}" | tac))
        for workers in "${order[@]}"; do runs+=("$round $workers"); done
      done
      on_gpu 0 kernel-build bash -c 'for run in "$@"; do
          read -r round workers <<<"$run"
          caches=$(mktemp -d)
          ( cd "'"$tree"'" && WARP_CACHE_PATH=$caches/warp CUDA_CACHE_PATH=$caches/nv PYTHONPATH="'"$PWD/overlay:$tree/src:$PYTHONPATH"'" \
            UNISIM_MJWARP_BUILD_WORKERS=$workers python3 "'"$PWD"'/experiments/evidence/mjwarp_kernel_build.py" --num-envs "'"${KB_NUM_ENVS:-256}"'" \
            --output "'"$work"'/kernel-build/workers-$workers-round$round.json" ); echo "$run: exit $?"
          rm -rf "$caches"
        done' kernel-build "${runs[@]}"
      ;;
    env-graph)
      mkdir -p "$work/env-graph"
      on_gpu 0 env-graph bash -c 'cd "'"$tree"'" || exit 1
        export PYTHONPATH="'"$PWD/overlay:$tree/src:$PYTHONPATH"'"
        for run in "memory" "memory --shared-pool" "draws" "draws --offset-shifted" "reset" \
                   "reset --condition-unset" "reset --every-step" "failed" "failed --leave-open" "split" \
                   "split --misplaced-stamp"; do
          python3 "'"$PWD"'/experiments/evidence/device_env_graph_check.py" --mode $run \
            --num-envs "'"${ENV_GRAPH_ENVS:-256}"'" >"'"$work"'/env-graph/${run// /}.json"; echo "$run: exit $?"
        done
        for run in "" "--leave-open"; do
          python3 "'"$PWD"'/experiments/evidence/capture_failure_check.py" $run \
            >"'"$work"'/env-graph/learner-capture-failure${run// /}.json"; echo "learner capture failure $run: exit $?"
        done'
      ;;
    learner-profile)
      mkdir -p "$work/learner-profile"
      on_gpu 0 learner-profile bash -c 'cd "'"$tree"'" || exit 1
        export PYTHONPATH="'"$PWD/overlay:$tree/src:$PYTHONPATH"'"
        for setting in '"${LP_SETTINGS:-unilab-default report}"'; do
          schedule=; [ "$setting" = report ] && schedule="--updates-per-step 2"  # the report at 2/1/1
          for path in "" "--no-aligned-products" "--no-combo-kernels" "--per-update"; do
            python3 "'"$PWD"'/experiments/evidence/learner_kernel_profile.py" --setting "$setting" $schedule $path \
              --output "'"$work"'/learner-profile/$setting${path:+-${path#--}}.json" >/dev/null
            echo "$setting $path: exit $?"
          done
        done'
      ;;
    capture-probe)
      mkdir -p "$work/capture-probe"
      tasks=${PROBE_TASKS:-go2_joystick_flat g1_motion_tracking}
      sources=${UNILAB_ASSETS:-$(ls "${WHEELHOUSE:-.whl}"/assets/*.tar.xz | paste -sd:)}
      for task in $tasks; do
        python3 -c "import sys; from pathlib import Path; sys.path[:0] = ['experiments/bench', 'scripts']; \
import bench_env; print(bench_env.ensure_assets(Path('$tree').resolve(), '$sources', '$task', synthetic_clip=True))" \
          >>"$work/capture-probe/assets.log" 2>&1 || { echo "capture-probe: $task's assets" >&2; exit 1; }
      done
      on_gpu 0 capture-probe bash -c 'cd "'"$tree"'" || exit 1
        export PYTHONPATH="'"$PWD/overlay:$tree/src:$PYTHONPATH"'"
        for task in '"$tasks"'; do
          python3 "'"$PWD"'/experiments/evidence/device_capture_probe.py" --task $task \
            --output "'"$work"'/capture-probe/$task.json" >"'"$work"'/capture-probe/$task.log" 2>&1
          echo "$task: exit $?"
        done'
      ;;
    *) echo "device_evidence.sh: unknown mode $mode ($modes)" >&2
       exit 2 ;;
  esac
done
wait
