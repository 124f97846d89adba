"""Where the project keeps its inputs and build outputs (one place, so tests and the CLI agree)."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
VERSIONS_FILE = PROJECT_ROOT / "VERSIONS.env"
PATCHES_DIR = PROJECT_ROOT / "patches"
OVERLAY_DIR = PROJECT_ROOT / "overlay"
RUNTIME_DIR = PROJECT_ROOT / "runtime"  # the project's own packages (targets.OWN_PACKAGES), placed into the overlay
#: The project's folders of its own files, committed (an overlay must not be built among them).
SOURCE_DIRS = tuple(PROJECT_ROOT / name for name in ("docs", "experiments", "patches", "results", "runtime", "scripts",
                                                    "tests"))
PORT_REPORT_DIR = PROJECT_ROOT / "results" / "port-report"
EDIT_DIR = PROJECT_ROOT / "work" / "series-edit"  # patchset edit / refresh: the scratch repository of the series
STATE_DIRNAME = ".flashsac-overlay"


def cache_dir() -> Path:
    """Download cache for the pinned sdist and wheel; git-ignored, overridable for offline use."""
    return Path(os.environ.get("PATCHSET_CACHE", PROJECT_ROOT / ".cache" / "downloads"))


def embedded_tree() -> Path:
    """The default UniLab tree made from the pinned sdist, ``work/unilab-<UNILAB_VERSION>``.

    PATCHSET_EMBEDDED_TREE moves it (e.g. for tests).
    """
    from .pins import load_pins  # pins reads VERSIONS_FILE from this module

    default = PROJECT_ROOT / "work" / f"unilab-{load_pins()['UNILAB_VERSION']}"
    return Path(os.environ.get("PATCHSET_EMBEDDED_TREE", default))
