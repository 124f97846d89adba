"""The G1 meshes and textures a MuJoCo G1 run needs, as one .tar.xz laid out like UniLab's `src/unilab/assets/`.

UniLab 1.3.2 keeps them on Hugging Face (`unilab.assets.hub`) and downloads them on first use, which an offline
host cannot do. Here they come either from UniLab's own download (its `ROBOT_ASSET_SPECS["g1"]` directories,
through its `resolve_robot_asset_dir`, so the repository and mirror fallback are UniLab's) or from an archive or
folder the user gives (ASSETS=...). Stored compressed (19 MB of meshes are 6 MB as .tar.xz); the bench seeds a
tree from the archive (`bench_env.seed_assets`).
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from . import OfflineError

ROBOT = "g1"
FOLDER = "assets"  # in the wheelhouse; the archive is the only file there


def archive_name(unilab_version: str) -> str:
    return f"unilab-{unilab_version}-{ROBOT}-assets.tar.xz"


def _g1_specs() -> tuple[tuple[str, str], ...]:
    """(directory, completeness marker) pairs of UniLab's G1 asset spec, from the installed UniLab."""
    try:
        from unilab.assets.hub import ROBOT_ASSET_SPECS
    except ImportError as exc:
        raise OfflineError(f"cannot import UniLab's asset hub ({exc}): run `make setup` first") from exc
    return tuple((directory, marker) for directory, marker, _glob, _label in ROBOT_ASSET_SPECS[ROBOT])


def _require_markers(present: set[str], source: object) -> None:
    missing = [f"{d}/{m}" for d, m in _g1_specs() if f"{d}/{m}" not in present]
    if missing:
        raise OfflineError(
            f"the G1 assets {source} lack {', '.join(missing)}: give an archive or folder laid out like "
            f"src/unilab/assets/ (robots/g1/assets/*.STL, robots/g1/textures/floor.png)"
        )


def download(dest: Path) -> str:
    """UniLab's own Hugging Face download of the G1 directories into dest; returns a description of the source."""
    from unilab.assets import hub

    specs = _g1_specs()
    installed_root, hub.ASSETS_ROOT_PATH = hub.ASSETS_ROOT_PATH, dest  # resolve here, not into the package
    try:
        for directory, marker in specs:
            hub.resolve_robot_asset_dir(directory, marker=marker, show_progress=False)
    except Exception as exc:  # network, HTTP and hub errors alike: one line, and the way around it
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise OfflineError(
            f"cannot download the G1 assets from Hugging Face ({hub._HF_ROBOTS_REPO_ID}: {reason}); "
            f"without access pass ASSETS=<.tar.xz or folder laid out like src/unilab/assets/>"
        ) from exc
    finally:
        hub.ASSETS_ROOT_PATH = installed_root
    shutil.rmtree(dest / ".cache", ignore_errors=True)  # huggingface_hub's download bookkeeping
    return f"huggingface.co dataset {hub._HF_ROBOTS_REPO_ID} ({', '.join(d for d, _ in specs)})"


def pack(folder: Path, archive: Path) -> int:
    """Every file under folder into a reproducible .tar.xz (sorted, no owners, no times); returns the count."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    _require_markers({p.relative_to(folder).as_posix() for p in files}, folder)
    with tarfile.open(archive, "w:xz") as out:
        for path in files:
            info = tarfile.TarInfo(path.relative_to(folder).as_posix())
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, 0
            with path.open("rb") as handle:
                out.addfile(info, handle)
    return len(files)


def _members(source: Path) -> list[str]:
    """Names of the regular files of a tar archive; refuses members that would land outside the assets folder."""
    with tarfile.open(source) as archive:
        names = []
        for member in archive.getmembers():
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise OfflineError(f"ASSETS={source}: member {member.name} lies outside the assets folder")
            if member.isfile():
                names.append(name.as_posix())
    return names


def collect(archive: Path, source: Path | None) -> tuple[str, int]:
    """Write the G1 asset archive from source (archive or folder) or UniLab's download; returns (source, files)."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    if source is None:
        with tempfile.TemporaryDirectory() as tmp:
            described = download(Path(tmp))
            return described, pack(Path(tmp), archive)
    source = source.expanduser()
    if source.is_dir():
        return str(source), pack(source, archive)
    if not source.is_file():
        raise OfflineError(f"ASSETS={source} does not exist")
    if not tarfile.is_tarfile(source):
        raise OfflineError(f"ASSETS={source} is neither a folder nor a tar archive")
    names = _members(source)
    _require_markers(set(names), source)
    try:
        with tarfile.open(source, "r:xz"):
            is_xz = True
    except tarfile.ReadError:
        is_xz = False
    if is_xz:
        shutil.copyfile(source, archive)
        return str(source), len(names)
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(source) as given:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # names were checked above either way
        given.extractall(tmp, members=[m for m in given.getmembers() if m.isfile()], **safe)
        return str(source), pack(Path(tmp), archive)
