# FlashSAC patch-set overlay. `make apply` and `make test` do everything on a fresh machine.
# Variables: UNILAB=<checkout> (default: embedded tree from the pinned sdist), PYTHON=<UniLab interpreter>,
#            ALLOW_DRIFT=1, ALLOW_OTHER_COMMIT=1, FORCE=1 (revert over your edits, saved byte for byte first).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
SETUP_STAMP := $(VENV)/.setup-$(shell sha256sum requirements.txt | cut -c1-16)
PATCHSET := PYTHONPATH=scripts $(PY) -m patchset
TARGET_ARGS = $(if $(UNILAB),--unilab "$(UNILAB)") $(if $(PYTHON),--python "$(PYTHON)") $(if $(OVERLAY),--overlay "$(OVERLAY)")
export ALLOW_DRIFT ALLOW_OTHER_COMMIT FORCE

.PHONY: setup apply status revert provenance manifest port-report test clean

setup: $(SETUP_STAMP)

$(SETUP_STAMP): requirements.txt
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@rm -f $(VENV)/.setup-* && touch $@

apply: setup
	$(PATCHSET) apply $(TARGET_ARGS)

status: setup
	$(PATCHSET) status $(TARGET_ARGS) $(if $(JSON),--json)

revert: setup
	$(PATCHSET) revert $(TARGET_ARGS)

provenance: setup
	$(PATCHSET) provenance $(TARGET_ARGS)

# After editing patches/: re-plan the series over the pristine pinned trees and rewrite patches/MANIFEST.json.
manifest: setup
	$(PATCHSET) manifest

# The series tried on an upstream release from PyPI: TARGET=unilab-rl==<version> or TARGET=unilab==<version>.
port-report: setup
	$(PATCHSET) port-report --target "$(TARGET)" $(if $(OUTPUT),--output "$(OUTPUT)")

test: setup
	$(PY) -m pytest -q tests $(PYTEST_ARGS)

clean:
	rm -rf .cache work overlay/uni_rl overlay/unisim overlay/MANIFEST.json

-include experiments/Makefile.bench.mk
