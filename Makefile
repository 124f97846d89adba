# FlashSAC patch-set overlay. `make apply` and `make test` do everything on a fresh machine.
# Variables: UNILAB=<checkout> (default: embedded tree from the pinned sdist), PYTHON=<UniLab interpreter>,
#            ALLOW_DRIFT=1, ALLOW_OTHER_COMMIT=1, FORCE=1 (revert over your edits, saved byte for byte first).
# Offline GPU host (docs/offline-host.md): `make wheelhouse [WHEELHOUSE=wheelhouse] [PYTHON_VERSION=3.12]
#            [ASSETS=<.tar.xz|folder>[:<another>]]` (the G1 and the Go2 assets) on a networked machine; there,
#            any target with OFFLINE=<wheelhouse> [OFFLINE_SITE=work/offline-site] runs on python3 with the verified
#            wheelhouse instead of the venv; `make apply OFFLINE=` ends by seeding the tree with the wheelhouse's
#            G1 and Go2 assets (never overwriting).
#            WHEEL_LIST=<file>: another list than scripts/offline/gpu-host-wheels.txt (e.g. without the 163 MB
#            warp-lang wheel for CPU-MuJoCo hosts); give the same WHEEL_LIST with OFFLINE= on the host.
#            With warp-lang listed, the wheelhouse also carries MuJoCo Warp's CUDA kernels for G1 Walk Flat and Go2
#            Joystick Flat, built from the applied tree (`make apply wheelhouse`) for WARP_ARCHS (default 90:
#            H100/H200; e.g. "80 86 89 90") and WARP_WORLDS (default 256 4096) plus each task's own default world
#            count; `make setup OFFLINE=` puts them into the host's Warp kernel cache.
#            COMPILE_ARTIFACTS=<dir> (from `make compile-artifacts` on a GPU host) carries the learner's compile
#            artifacts too; `make setup OFFLINE=` puts them into its compile cache where torch and GPU match.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-$(shell sha256sum requirements.txt | cut -c1-16)
TARGET_ARGS = $(if $(UNILAB),--unilab "$(UNILAB)") $(if $(PYTHON),--python "$(PYTHON)") $(if $(OVERLAY),--overlay "$(OVERLAY)")
WHEELHOUSE ?= wheelhouse
PYTHON_VERSION ?= 3.12
export ALLOW_DRIFT ALLOW_OTHER_COMMIT FORCE

ifdef OFFLINE
# No venv and no network: python3 with the wheelhouse's wheels in a private site folder; the pinned sdist/wheel
# (PATCHSET_CACHE) and the G1 and Go2 assets (every archive, joined by ':') come from the wheelhouse, and nothing
# may reach Hugging Face.
OFFLINE_SITE ?= work/offline-site
PYTHON ?= python3
PY := $(PYTHON)
export PYTHONPATH := $(abspath $(OFFLINE_SITE))$(if $(PYTHONPATH),:$(PYTHONPATH))
export PATCHSET_CACHE := $(abspath $(OFFLINE))/pinned
export HF_HUB_OFFLINE := 1
export MUJOCO_GL ?= disable
export WANDB_MODE ?= disabled
EMPTY :=
SPACE := $(EMPTY) $(EMPTY)
UNILAB_ASSETS ?= $(subst $(SPACE),:,$(strip $(sort $(wildcard $(abspath $(OFFLINE))/assets/*.tar.xz))))
endif

# Each long step is named and timed (scripts/make_steps.py); `make apply` ends with the list of its steps.
STEPS_LOG := $(if $(filter apply,$(MAKECMDGOALS)),work/.make-steps-$(shell date +%s%N).jsonl)
# pip shows its own progress on a terminal; a log (CI) gets only the steps' lines.
PIP_OUTPUT ?= $(if $(shell [ -t 2 ] && echo tty),--progress-bar on,--quiet)
STEP = python3 scripts/make_steps.py run $(if $(STEPS_LOG),--log $(STEPS_LOG))
PATCHSET := env PYTHONPATH=scripts$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m patchset
OFFLINE_TOOL := env PYTHONPATH=scripts$${PYTHONPATH:+:$$PYTHONPATH} $(PY) -m offline

.PHONY: setup apply status revert provenance manifest port-report test test-extended clean wheelhouse \
	compile-artifacts

ifdef OFFLINE
setup:
	@$(STEP) "verify the wheelhouse $(OFFLINE), install it into $(OFFLINE_SITE)" -- \
	  $(OFFLINE_TOOL) install "$(OFFLINE)" --site "$(OFFLINE_SITE)" $(if $(WHEEL_LIST),--wheel-list "$(WHEEL_LIST)")
else
setup: $(SETUP_STAMP)
endif

$(SETUP_STAMP): requirements.txt
	@test -x $(PY) || $(STEP) "create the venv $(VENV)" -- python3 -m venv $(VENV)
	@$(STEP) "install the pinned stack into $(VENV) (pip; minutes the first time)" -- \
	  $(PY) -m pip install --disable-pip-version-check $(PIP_OUTPUT) -r requirements.txt
	@rm -f $(VENV)/.setup-* && touch $@

apply: setup
	@$(STEP) "apply the series" -- \
	  $(PATCHSET) apply $(TARGET_ARGS)
ifdef OFFLINE
	@$(STEP) "seed the wheelhouse's assets (G1, Go2) into the tree" -- \
	  $(OFFLINE_TOOL) seed-assets "$(OFFLINE)" $(if $(UNILAB),--tree "$(UNILAB)")
	@$(STEP) "compile G1 motion tracking's Numba kernels into the tree (this CPU's code, once per host)" -- \
	  $(OFFLINE_TOOL) numba-kernels $(if $(UNILAB),--tree "$(UNILAB)") $(if $(OVERLAY),--overlay "$(OVERLAY)")
endif
	@python3 scripts/make_steps.py summary --log $(STEPS_LOG) "make apply"

status: setup
	$(PATCHSET) status $(TARGET_ARGS) $(if $(JSON),--json)

revert: setup
	$(PATCHSET) revert $(TARGET_ARGS)

provenance: setup
	$(PATCHSET) provenance $(TARGET_ARGS)

# After editing patches/: re-plan the series over the pristine pinned trees and rewrite patches/MANIFEST.json.
manifest: setup
	$(PATCHSET) manifest

# On a networked machine: everything an offline GPU host needs (docs/offline-host.md).
wheelhouse: setup
	$(OFFLINE_TOOL) build "$(WHEELHOUSE)" --python-version "$(PYTHON_VERSION)" $(if $(ASSETS),--assets "$(ASSETS)") \
	  $(if $(WHEEL_LIST),--wheel-list "$(WHEEL_LIST)") $(if $(UNILAB),--unilab-tree "$(UNILAB)") \
	  $(if $(WARP_ARCHS),--warp-archs $(WARP_ARCHS)) $(if $(WARP_WORLDS),--warp-worlds $(WARP_WORLDS)) \
	  $(if $(COMPILE_ARTIFACTS),--compile-artifacts "$(COMPILE_ARTIFACTS)")

# On a GPU host with the series applied: the learner's compile artifacts for its torch and GPU, built by one
# training iteration per setting (scripts/offline/compile_artifacts.py), into COMPILE_ARTIFACTS (default
# work/compile-artifacts) of COMPILE_TASK (default g1_walk_flat/mjwarp; g1_walk_flat/mujoco for CPU MuJoCo hosts)
# with COMPILE_COLLECTOR (host or device; default the owner's own, e.g. g1_motion_tracking/mjwarp's host collector);
# `make wheelhouse COMPILE_ARTIFACTS=...` carries them to offline hosts.
compile-artifacts: setup
	$(OFFLINE_TOOL).compile_artifacts "$(or $(COMPILE_ARTIFACTS),work/compile-artifacts)" \
	  $(if $(UNILAB),--unilab-tree "$(UNILAB)") $(if $(COMPILE_TASK),--task "$(COMPILE_TASK)") \
	  $(if $(COMPILE_COLLECTOR),--collector "$(COMPILE_COLLECTOR)")

# The series tried on an upstream release from PyPI: TARGET=unilab-rl==<version> or TARGET=unilab==<version>.
port-report: setup
	$(PATCHSET) port-report --target "$(TARGET)" $(if $(OUTPUT),--output "$(OUTPUT)")

# The default suite leaves out the tests marked extended (real Inductor compiles on the CPU and the longest
# end-to-end runs whose guarantee a default test also checks: docs/tests.md); test-extended runs every test.
# Both list their 20 slowest steps: the suite has a 15-minute budget on the 2-core CI machine, and the list
# says where its time goes. TEST_WORKERS pytest
# processes (pytest-xdist) take whole test files each: most tests wait on one child process at a time, so one
# process alone kept about one core busy.
TEST_WORKERS ?= 2
test: setup
	$(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadfile tests -m "not extended" $(PYTEST_ARGS)

test-extended: setup
	$(PY) -m pytest -q --durations=20 -n $(TEST_WORKERS) --dist loadfile tests $(PYTEST_ARGS)

clean:
	rm -rf .cache work overlay/uni_rl overlay/unisim overlay/MANIFEST.json

-include experiments/bench/Makefile.bench.mk
ifdef OFFLINE
bench bench-parity: setup
endif
