# Benchmark targets; included by the main Makefile (-include experiments/bench/Makefile.bench.mk).
#
#   make bench [QUICK=1] [UNILAB=<tree>] [PYTHON=<UniLab interpreter>] [ITERATIONS=1000] [SUMMARY_LAST=500]
#              [SETTING=report|unilab-default|report,unilab-default] [SIM=mujoco|mjwarp|mujoco,mjwarp] [SCHEDULES=2,8] [CONFIGS=baseline-1.3.2,eager,...] [REPEATS=1] [UNILAB_ASSETS=<dir|.tar.xz>]
#              [COLLECTOR=host|device|host,device]   (device: the device-resident collector, SIM=mjwarp runs only)
#              [TASK=g1_walk_flat|g1_motion_tracking|go2_joystick_flat] [SYNTHETIC_CLIP=1]   (docs/tasks.md;
#              UNILAB_ASSETS may join several sources with ':', e.g. the G1 and the Go2 archives)
#              [APPLY=1] [SKIP_VERIFY=1] [TIMEOUT_S=<per run>]
#              [MACHINE=h200] [STUDY=bench]   (the run's folder: results/<date>-<machine>-<study>/)
#              [NO_CHECKS=1 | CHECK_NUMERICS='<cmd>' CHECK_REPLAY='<cmd>' | CHECKS_JSON=<file>] [BENCH_ARGS=...]
#   make bench-parity [QUICK=1] [SEEDS=1,2,3,4,5] [ITERATIONS=3000] [SETTING=report|unilab-default]
#                     [TASK=g1_walk_flat|g1_motion_tracking|go2_joystick_flat] [SYNTHETIC_CLIP=1]
#                     [BENCH_ARGS="--arms A,B"] ...   (exit 0: trusted check; every arm on the task's CPU MuJoCo owner)
#                     (results/<date>-<machine>-parity/, parity-<task>/ for another task, unless STUDY= names another)
#   make bench-report DIR=results/<date>-<machine>-<study>   (rebuild summary.md + timings.png from the JSON)
#   make bench-whole-run [OWNER=g1_walk_flat/mjwarp] [OVERRIDES='algo.num_envs=256 ...'] [LABEL=whole-run]
#                        [DIR=work/whole-run] [BESIDE=unpatched-1.3.2 [PRISTINE=<tree>] [BASELINE_UNI_RL=<dir>]]
#                        [SYNTHETIC_CLIP=1]   (UniLab's whole run
#                        from the tree's root, timed from launch to its end: experiments/bench/whole_run.py; the
#                        overlay first on PYTHONPATH; BESIDE: then the same run on the pristine tree with the
#                        pristine unilab-rl 1.3.2, the task's assets from UNILAB_ASSETS)
#
# Needs CUDA (exits with one error line otherwise). No dependency on `setup`: a GPU host brings its own
# interpreter (PYTHON=...). On a host without network: `make bench OFFLINE=<wheelhouse>` (docs/offline-host.md)
# verifies and installs the wheelhouse first, then runs on python3 with its wheels and G1 assets.
# CHECK_NUMERICS / CHECK_REPLAY: commands run first on the same machine; their `passed` flags go in every run JSON.
# CHECKS_JSON: the results of those checks run earlier on this machine (experiments/device/device_evidence.sh), embedded instead.

BENCH_PY = $(or $(PYTHON),$(if $(wildcard $(PY)),$(PY),python3))
BENCH_COMMON = $(if $(UNILAB),--unilab-root "$(UNILAB)") $(if $(UNILAB_ASSETS),--assets "$(UNILAB_ASSETS)") \
               $(if $(SKIP_VERIFY),--skip-verify) $(if $(filter 1,$(QUICK)),--quick) \
               $(if $(ITERATIONS),--iterations $(ITERATIONS)) $(if $(TIMEOUT_S),--timeout-s $(TIMEOUT_S)) \
               $(if $(BASELINE_WHEEL),--baseline-wheel "$(BASELINE_WHEEL)") \
               $(if $(MACHINE),--machine "$(MACHINE)") $(if $(STUDY),--study "$(STUDY)")

# The numerics and replay-stability checks of the series, run first on the same machine (NO_CHECKS=1 skips them).
# The driver extracts the pristine base learner to work/bench/unilab-rl-<version> before it runs them.
# (bench_env.BASELINE_UNI_RL_DIR: named by VERSIONS.env's UNILAB_RL_BASE_VERSION)
BENCH_BASELINE_ROOT ?= work/bench/unilab-rl-$(shell sed -n 's/^UNILAB_RL_BASE_VERSION=//p' VERSIONS.env)
ifeq ($(NO_CHECKS)$(CHECKS_JSON),)
CHECK_NUMERICS ?= $(if $(wildcard experiments/evidence/validate_numerics.py),$(BENCH_PY) experiments/evidence/validate_numerics.py --mode gpu \
  --baseline-root $(BENCH_BASELINE_ROOT) --patched-root overlay --output work/bench-checks/numerics.json)
CHECK_REPLAY ?= $(if $(wildcard experiments/evidence/validate_replay_stability.py),$(BENCH_PY) experiments/evidence/validate_replay_stability.py \
  --patched-root overlay $(if $(filter 1,$(QUICK)),--iterations 100) --output work/bench-checks/replay.json)
endif

.PHONY: bench bench-parity bench-report bench-whole-run

bench:
	$(BENCH_PY) experiments/bench/bench_matrix.py $(BENCH_COMMON) $(if $(TASK),--task "$(TASK)") \
	  $(if $(filter 1,$(SYNTHETIC_CLIP)),--synthetic-motion-clip) \
	  $(if $(SUMMARY_LAST),--summary-last $(SUMMARY_LAST)) $(if $(SCHEDULES),--schedules $(SCHEDULES)) \
	  $(if $(SETTING),--settings $(SETTING)) $(if $(SIM),--sims $(SIM)) $(if $(COLLECTOR),--collectors $(COLLECTOR)) \
	  $(if $(CONFIGS),--configs $(CONFIGS)) $(if $(REPEATS),--repeats $(REPEATS)) $(if $(APPLY),--apply) \
	  $(if $(CHECK_NUMERICS),--check 'numerics=$(CHECK_NUMERICS)') \
	  $(if $(CHECK_REPLAY),--check 'replay-stability=$(CHECK_REPLAY)') \
	  $(if $(CHECKS_JSON),--checks-json "$(CHECKS_JSON)") $(BENCH_ARGS)

bench-parity:
	$(BENCH_PY) experiments/bench/bench_parity.py $(BENCH_COMMON) $(if $(SEEDS),--seeds $(SEEDS)) \
	  $(if $(TASK),--task "$(TASK)") $(if $(filter 1,$(SYNTHETIC_CLIP)),--synthetic-motion-clip) \
	  $(if $(SETTING),--setting $(SETTING)) $(BENCH_ARGS)

bench-report:
	@test -n "$(DIR)" || { echo "bench-report: set DIR=results/<date>-<machine>-<study>" >&2; exit 2; }
	$(BENCH_PY) experiments/bench/bench_report.py "$(DIR)"

WHOLE_RUN_TREE = $(abspath $(or $(UNILAB),work/unilab-$(shell sed -n 's/^UNILAB_VERSION=//p' VERSIONS.env)))
bench-whole-run:
	cd "$(WHOLE_RUN_TREE)" && PYTHONPATH="$(abspath $(or $(OVERLAY),overlay)):$(WHOLE_RUN_TREE)/src$${PYTHONPATH:+:$$PYTHONPATH}" \
	  $(if $(findstring /,$(BENCH_PY)),$(abspath $(BENCH_PY)),$(BENCH_PY)) "$(CURDIR)/experiments/bench/whole_run.py" --tree . --out "$(abspath $(or $(DIR),work/whole-run))" \
	  --label "$(or $(LABEL),whole-run)" --overlay "$(abspath $(or $(OVERLAY),overlay))" \
	  $(if $(BESIDE),--beside "$(BESIDE)") $(if $(UNILAB_ASSETS),--assets "$(UNILAB_ASSETS)") \
	  $(if $(filter 1,$(SYNTHETIC_CLIP)),--synthetic-motion-clip) $(if $(PRISTINE),--pristine-tree "$(abspath $(PRISTINE))") \
	  $(if $(BASELINE_UNI_RL),--baseline-uni-rl "$(abspath $(BASELINE_UNI_RL))") \
	  -- task=$(or $(OWNER),g1_walk_flat/mjwarp) $(OVERRIDES)
