"""Upstream releases as port targets: `unilab-rl==X` (its wheel) or `unilab==X` (its sdist), fetched from the
package index with pip into the project's download cache, and read as trees in memory.

The pinned base versions go through fetch.pinned_artifact, so their sha256 is checked against VERSIONS.env;
any other version is whatever the index served (pip verifies the index's own hash on download) and the
report records the sha256 of the file it was made from.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .errors import PatchsetError
from .fetch import file_sha256, index_url, pinned_artifact
from .paths import cache_dir
from .pins import load_pins


@dataclass(frozen=True)
class Project:
    """One upstream project the series targets: which artifact carries the tree, and its pinned base."""

    name: str  # canonical PyPI name
    series_target: str  # the series' target name of its patches (patches/<series_target>/)
    kind: str  # "wheel" or "sdist"
    tree: str  # the part of the artifact the patches change
    base_version_key: str  # VERSIONS.env key of the pinned base version
    base_file_key: str
    base_sha256_key: str

    def filename_glob(self, version: str) -> str:
        stem = self.name.replace("-", "_")
        return f"{stem}-{version}-*.whl" if self.kind == "wheel" else f"{self.name}-{version}.tar.gz"


PROJECTS = {
    "unilab-rl": Project("unilab-rl", "uni_rl", "wheel", "uni_rl", "UNILAB_RL_BASE_VERSION",
                         "UNILAB_RL_BASE_WHEEL", "UNILAB_RL_BASE_WHEEL_SHA256"),
    "unilab": Project("unilab", "unilab", "sdist", "src/unilab", "UNILAB_VERSION",
                      "UNILAB_SDIST", "UNILAB_SDIST_SHA256"),
}


@dataclass(frozen=True)
class Release:
    """A fetched release file of one project."""

    project: Project
    version: str
    path: Path
    sha256: str


def parse_target(spec: str) -> tuple[Project, str]:
    """'unilab-rl==1.4.15' -> (project, '1.4.15'); names are matched as PyPI matches them."""
    match = re.fullmatch(r"\s*([A-Za-z0-9._-]+)\s*==\s*([^\s=]+)\s*", spec)
    if not match:
        raise PatchsetError(f"target {spec!r} is not of the form unilab-rl==<version> or unilab==<version>")
    name = canonicalize_name(match.group(1))
    if name not in PROJECTS:
        raise PatchsetError(f"unknown target {match.group(1)!r}: the series targets {', '.join(sorted(PROJECTS))}")
    try:
        version = str(Version(match.group(2)))
    except InvalidVersion as exc:
        raise PatchsetError(f"target {spec!r}: {match.group(2)!r} is not a version") from exc
    return PROJECTS[name], version


def base_release(project: Project) -> Release:
    """The pinned base artifact (sha256-checked against VERSIONS.env)."""
    pins = load_pins()
    path = pinned_artifact(pins[project.base_file_key], pins[project.base_sha256_key])
    return Release(project, pins[project.base_version_key], path, pins[project.base_sha256_key])


def _pip_download(project: Project, version: str, dest: Path) -> Path:
    """pip download of exactly this release file into dest (a fresh directory); returns the file."""
    binary = ["--only-binary", ":all:"] if project.kind == "wheel" else ["--no-binary", project.name]
    base = index_url()
    env = {**os.environ, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}  # this index only, no local wheels
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--retries", "1",
         "--index-url", base, *binary, "-d", str(dest), f"{project.name}=={version}"],
        capture_output=True, text=True, timeout=900, check=False, env=env,
    )
    found = sorted(dest.glob(project.filename_glob(version)))
    if proc.returncode == 0 and len(found) == 1:
        return found[0]
    offered = re.search(r"\(from versions: ([^)]*)\)", proc.stderr)
    if offered and offered.group(1) != "none":
        newest = offered.group(1).split(", ")[-1]
        raise PatchsetError(f"{project.name} {version} is not on the package index {base} (newest there: {newest})")
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise PatchsetError(
        f"{project.name} {version} is not in the cache {cache_dir()} and cannot be downloaded from {base} ({last})"
    )


def fetch_release(project: Project, version: str) -> Release:
    """The release file from the cache, else downloaded with pip into the cache (moved in only when complete)."""
    pins = load_pins()
    if version == pins[project.base_version_key]:
        return base_release(project)
    cache = cache_dir()
    cached = sorted(cache.glob(project.filename_glob(version)))
    if not cached:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            got = _pip_download(project, version, Path(tmp))
            os.replace(got, cache / got.name)
        cached = [cache / got.name]
    if len(cached) > 1:
        raise PatchsetError(f"the cache {cache} holds several files for {project.name} {version}: "
                            f"{', '.join(p.name for p in cached)}; keep one")
    return Release(project, version, cached[0], file_sha256(cached[0]))


class ReleaseTree:
    """The files of a release, read in memory: a wheel's root, or an sdist's single top directory."""

    def __init__(self, release: Release) -> None:
        self._files: dict[str, bytes] = {}
        path = release.path
        try:
            if release.project.kind == "wheel":
                with zipfile.ZipFile(path) as zf:
                    self._files = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
            else:
                with tarfile.open(path) as tar:
                    for member in tar.getmembers():
                        if member.isfile() and "/" in member.name:
                            self._files[member.name.split("/", 1)[1]] = tar.extractfile(member).read()
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
            raise PatchsetError(f"cannot read {path}: {exc}") from exc

    def read(self, rel: str) -> bytes | None:
        return self._files.get(rel)
