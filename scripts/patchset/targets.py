"""The three pinned targets of the series, and the project's own packages, in one place.

'unilab' is a UniLab checkout patched in place. Every other target is an overlay package: one top-level
package taken out of a sha256-pinned upstream artifact (named by its VERSIONS.env keys), patched in memory and
placed in the overlay directory, which is first on PYTHONPATH at run time and so shadows the installed copy.
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKOUT_TARGET = "unilab"


@dataclass(frozen=True)
class OverlayPackage:
    """An overlay target: the package name (also its series target) and the pins of the artifact it comes from."""

    name: str
    file_key: str  # VERSIONS.env key of the artifact's file name (a .whl or an sdist .tar.gz)
    sha256_key: str  # VERSIONS.env key of its sha256

    def artifact(self, pins: dict[str, str]) -> tuple[str, str]:
        return pins[self.file_key], pins[self.sha256_key]


OVERLAY_PACKAGES = (
    OverlayPackage("uni_rl", "UNILAB_RL_BASE_WHEEL", "UNILAB_RL_BASE_WHEEL_SHA256"),
    OverlayPackage("unisim", "UNISIM_CORE_SDIST", "UNISIM_CORE_SDIST_SHA256"),
)
OVERLAY_TARGETS = tuple(p.name for p in OVERLAY_PACKAGES)
#: VERSIONS.env keys (file name, sha256) of every pinned artifact an apply reads: the UniLab sdist (the embedded
#: tree) and each overlay package's. Derived here so that whatever must carry them (the offline wheelhouse)
#: cannot miss one when a target is added.
PINNED_ARTIFACTS = (("UNILAB_SDIST", "UNILAB_SDIST_SHA256"), *((p.file_key, p.sha256_key) for p in OVERLAY_PACKAGES))
TARGETS = (CHECKOUT_TARGET, *OVERLAY_TARGETS)
#: The project's own packages (runtime/<name>, code of this project, not a series target): placed into the
#: overlay beside the patched packages by every apply, their files recorded like the patched ones.
OWN_PACKAGES = ("flashsac_runtime",)
#: Every package directory an apply builds in the overlay.
OVERLAY_DIRS = (*OVERLAY_TARGETS, *OWN_PACKAGES)
