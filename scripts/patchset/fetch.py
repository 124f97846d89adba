"""The two pinned upstream artifacts: the unilab sdist and the unilab-rl base wheel, cached and sha256-verified.

Downloads go through the package index pip is configured with (PEP 503 simple pages), so the cache works on
any machine that can 'pip install'. A file given by path or found in the cache is never trusted by name:
its sha256 must equal the pin.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from .errors import PatchsetError
from .paths import cache_dir


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def index_url() -> str:
    """PATCHSET_INDEX_URL, else pip's configured index, else pip's default (PyPI)."""
    configured = os.environ.get("PATCHSET_INDEX_URL") or os.environ.get("PIP_INDEX_URL")
    if configured:
        return configured.rstrip("/")
    from pip._internal.models.index import PyPI  # pip's own notion of the default index

    return PyPI.simple_url.rstrip("/")


def _project_of(filename: str) -> str:
    """Normalized project name (PEP 503) from a wheel or sdist filename."""
    stem = filename.split("-")[0]
    return re.sub(r"[-_.]+", "-", stem).lower()


def _download(filename: str, sha256: str, dest: Path) -> None:
    base = index_url()
    page_url = f"{base}/{_project_of(filename)}/"
    try:
        with urllib.request.urlopen(page_url, timeout=60) as resp:
            page = resp.read().decode("utf-8", "replace")
        links = re.findall(r'href="([^"]+)"', page)
        url = next((u for u in links if urllib.parse.urlsplit(u).path.endswith("/" + filename)), None)
        if url is None:
            raise PatchsetError(f"{filename} is not listed on the package index {base}")
        url = urllib.parse.urljoin(page_url, url.split("#")[0])
        with urllib.request.urlopen(url, timeout=300) as resp, tempfile.NamedTemporaryFile(
            dir=dest.parent, delete=False
        ) as tmp:
            shutil.copyfileobj(resp, tmp)
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PatchsetError(
            f"{filename} is not in the cache {dest.parent} and cannot be downloaded from {base} ({reason}); "
            f"copy the file there or pass its path"
        ) from exc
    got = file_sha256(Path(tmp.name))
    if got != sha256:
        os.unlink(tmp.name)
        raise PatchsetError(f"downloaded {filename} has sha256 {got}, pinned {sha256}: refusing it")
    os.replace(tmp.name, dest)


def pinned_artifact(filename: str, sha256: str, given: Path | None = None) -> Path:
    """Path of a verified copy of the pinned file: the user's file, else the cache, else a fresh download."""
    if given is not None:
        if not given.is_file():
            raise PatchsetError(f"{given} does not exist")
        got = file_sha256(given)
        if got != sha256:
            raise PatchsetError(f"{given} has sha256 {got}, pinned {sha256} for {filename}")
        return given
    dest = cache_dir() / filename
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_file():
        got = file_sha256(dest)
        if got == sha256:
            return dest
        raise PatchsetError(f"cached {dest} has sha256 {got}, pinned {sha256}: delete it to re-download")
    _download(filename, sha256, dest)
    return dest
