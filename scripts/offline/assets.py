"""The meshes and textures the task owners' scenes need (G1 Walk Flat's and Go2 Joystick Flat's), one .tar.xz per
robot laid out like UniLab's `src/unilab/assets/`.

UniLab 1.3.2 keeps them on Hugging Face (`unilab.assets.hub`) and downloads them on first use, which an offline
host cannot do. Here they come either from UniLab's own download (its `ROBOT_ASSET_SPECS` directories of each
robot, through its `resolve_robot_asset_dir`, so the repository and mirror fallback are UniLab's) or from the
archives or folders the user gives (ASSETS=<one>:<another>, as `make bench UNILAB_ASSETS=` takes them), merged and
packed again per robot. Stored compressed (19 MB of G1 meshes are 6 MB as .tar.xz). The Warp kernel build unpacks
every robot's archive (Go2's scene loads its meshes); `make apply OFFLINE=` seeds the applied tree from every
archive the wheelhouse carries (``seed``: sha256-checked; ``seed_tree``: never overwriting a file that differs);
the bench seeds the trees it runs from the same archives (`bench_env.seed_assets`, which leaves a differing file
alone instead of refusing).
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from . import OfflineError, manifest

#: The robots of the task owners whose kernels the wheelhouse carries (warp_kernels.TASKS): one archive each.
ROBOTS = ("g1", "go2")
FOLDER = "assets"  # in the wheelhouse; the robots' archives are the only files there
#: Where each robot's files lie, as the message of a missing marker shows them.
_LAYOUT = {"g1": "robots/g1/assets/*.STL, robots/g1/textures/floor.png", "go2": "robots/go2/assets/*.obj"}


def archive_name(unilab_version: str, robot: str = "g1") -> str:
    return f"unilab-{unilab_version}-{robot}-assets.tar.xz"


def _specs(robot: str) -> tuple[tuple[str, str], ...]:
    """(directory, completeness marker) pairs of UniLab's asset spec for ``robot``, from the installed UniLab."""
    try:
        from unilab.assets.hub import ROBOT_ASSET_SPECS
    except ImportError as exc:
        raise OfflineError(f"cannot import UniLab's asset hub ({exc}): run `make setup` first") from exc
    return tuple((directory, marker) for directory, marker, _glob, _label in ROBOT_ASSET_SPECS[robot])


def _require_markers(present: set[str], source: object) -> None:
    """Every robot's markers are among ``present``; else one line naming what is missing and the layout."""
    for robot in ROBOTS:
        missing = [f"{d}/{m}" for d, m in _specs(robot) if f"{d}/{m}" not in present]
        if missing:
            raise OfflineError(
                f"the assets {source} lack {', '.join(missing)}: give archives or folders laid out like "
                f"src/unilab/assets/ ({_LAYOUT[robot]}), several joined by ':'"
            )


def download(dest: Path) -> str:
    """UniLab's own Hugging Face download of every robot's directories into dest; returns a description of it."""
    from unilab.assets import hub

    specs = [spec for robot in ROBOTS for spec in _specs(robot)]
    installed_root, hub.ASSETS_ROOT_PATH = hub.ASSETS_ROOT_PATH, dest  # resolve here, not into the package
    try:
        for directory, marker in specs:
            hub.resolve_robot_asset_dir(directory, marker=marker, show_progress=False)
    except Exception as exc:  # network, HTTP and hub errors alike: one line, and the way around it
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise OfflineError(
            f"cannot download the assets from Hugging Face ({hub._HF_ROBOTS_REPO_ID}: {reason}); without access "
            f"pass ASSETS=<.tar.xz or folder laid out like src/unilab/assets/>[:<another>]"
        ) from exc
    finally:
        hub.ASSETS_ROOT_PATH = installed_root
    shutil.rmtree(dest / ".cache", ignore_errors=True)  # huggingface_hub's download bookkeeping
    return f"huggingface.co dataset {hub._HF_ROBOTS_REPO_ID} ({', '.join(d for d, _ in specs)})"


def pack(folder: Path, archive: Path, robot: str = "g1") -> int:
    """``robot``'s files under folder (its spec's directories) into a reproducible .tar.xz (sorted, no owners, no
    times); returns the count."""
    roots = tuple(PurePosixPath(directory) for directory, _marker in _specs(robot))
    files = sorted(p for p in folder.rglob("*") if p.is_file()
                   and any(root in PurePosixPath(p.relative_to(folder).as_posix()).parents for root in roots))
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


def sources(joined: str) -> list[Path]:
    """ASSETS=<one>[:<another>...]: the sources in their order (empty parts left out)."""
    return [Path(part).expanduser() for part in joined.split(os.pathsep) if part]


def _merge(source: Path, stage: Path) -> None:
    """The files of one archive or folder into ``stage`` (a file already there, from an earlier source, is kept)."""
    if source.is_dir():
        files = {p.relative_to(source).as_posix(): p for p in source.rglob("*") if p.is_file()}
        for rel, path in files.items():
            if not (stage / rel).exists():
                (stage / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, stage / rel)
        return
    if not source.is_file():
        raise OfflineError(f"ASSETS={source} does not exist")
    if not tarfile.is_tarfile(source):
        raise OfflineError(f"ASSETS={source} is neither a folder nor a tar archive")
    _members(source)  # refuses members that would land outside the assets folder
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(source) as given:
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # names were checked above either way
        given.extractall(tmp, members=[m for m in given.getmembers() if m.isfile()], **safe)
        _merge(Path(tmp), stage)


def collect(folder: Path, unilab_version: str, given: Sequence[Path]) -> tuple[str, int]:
    """Each robot's archive (``archive_name``) into ``folder`` from the ``given`` archives and folders, merged
    (where two hold one file, the first one's is taken), or from UniLab's download when none is given; returns
    (source, files)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp)
        if given:
            for source in given:
                _merge(source, stage)
            described = ":".join(map(str, given))
        else:
            described = download(stage)
        _require_markers({p.relative_to(stage).as_posix() for p in stage.rglob("*") if p.is_file()}, described)
        return described, sum(pack(stage, folder / archive_name(unilab_version, robot), robot) for robot in ROBOTS)


#: Where a UniLab tree keeps its assets (UniLab's ``ASSETS_ROOT_PATH``), relative to the tree's root.
TREE_ASSETS = PurePosixPath("src/unilab/assets")


def _wheelhouse_archives(wheelhouse: Path) -> list[tuple[Path, str]]:
    """Each assets/*.tar.xz the wheelhouse records, with its recorded sha256; every one is checked here."""
    record = manifest.load(wheelhouse)
    archives = []
    for name, want in sorted(record["files"].items()):
        rel = PurePosixPath(name)
        if rel.parent.as_posix() != FOLDER or not rel.name.endswith(".tar.xz"):
            continue
        path = wheelhouse / name
        if not path.is_file():
            raise OfflineError(f"wheelhouse file {path} is missing (listed in {manifest.MANIFEST})")
        got = manifest.file_sha256(path)
        if got != want:
            raise OfflineError(f"wheelhouse file {path} has sha256 {got}, {manifest.MANIFEST} records {want}")
        archives.append((path, want))
    return archives


def seed_tree(archives: list[Path], tree: Path) -> tuple[int, int]:
    """Unpack the archives (laid out like src/unilab/assets/) into ``tree``'s src/unilab/assets; returns how many
    files were written and how many were there already.

    Every member is compared with the file already at its place before anything is written: a file that is there
    with the same bytes is left alone (a second call writes nothing), one with other bytes (or something that is
    not a file) stops the seeding with one line naming it, and nothing is written. New files are written beside
    their place and renamed into it. Where two archives hold one file, the first one's is taken.
    """
    dest = tree / TREE_ASSETS
    if not dest.is_dir():
        raise OfflineError(f"{dest} is not a folder: {tree} is not a UniLab tree")
    pending: dict[str, bytes] = {}
    present = 0
    for archive in archives:
        _members(archive)  # refuses members that would land outside the assets folder
        with tarfile.open(archive) as opened:
            for member in opened.getmembers():
                rel = PurePosixPath(member.name).as_posix()
                if not member.isfile() or rel in pending:
                    continue
                handle = opened.extractfile(member)
                assert handle is not None
                data = handle.read()
                target = dest / rel
                if target.is_symlink() or (target.exists() and not target.is_file()):
                    raise OfflineError(f"{target} is there and is not a plain file: not seeding the assets "
                                       f"from {archive.name} (move it away and run again)")
                if target.is_file():
                    if target.read_bytes() != data:
                        raise OfflineError(f"{target} differs from {archive.name}'s copy: not seeding the "
                                           f"assets, nothing written (move it away to take the wheelhouse's)")
                    present += 1
                    continue
                for parent in PurePosixPath(rel).parents:
                    where = dest / parent
                    if where.is_symlink() or (where.exists() and not where.is_dir()):
                        raise OfflineError(f"{where} is there and is not a folder: not seeding the assets "
                                           f"from {archive.name}")
                pending[rel] = data
    for rel, data in sorted(pending.items()):
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.seeding-{os.getpid()}")
        try:
            partial.write_bytes(data)
            os.chmod(partial, 0o644)
            os.replace(partial, target)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise OfflineError(f"cannot write {target} ({exc.strerror or exc}): the assets are seeded only in "
                               f"part; free the space or fix the folder and run again") from exc
    return len(pending), present


def seed(wheelhouse: Path, tree: Path) -> str:
    """Every asset archive of the wheelhouse, each checked against the sha256 the wheelhouse records, into
    ``tree``'s src/unilab/assets (``seed_tree``); returns the line to print."""
    if not (tree / TREE_ASSETS).is_dir():
        raise OfflineError(f"{tree / TREE_ASSETS} is not a folder: {tree} is not a UniLab tree")
    archives = [archive for archive, _sha in _wheelhouse_archives(wheelhouse)]
    if not archives:
        return f"assets: the wheelhouse {wheelhouse} carries none ({FOLDER}/*.tar.xz)"
    written, present = seed_tree(archives, tree)
    return (f"assets: {written} files put into {tree / TREE_ASSETS} from {', '.join(a.name for a in archives)} "
            f"(sha256 verified), {present} already there")
