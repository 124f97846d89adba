"""On the offline GPU host: verify the wheelhouse, install its wheels into a private site folder, check imports,
compile the Python bytecode of the site and of the host's own packages (bytecode.py says why), and put the
wheelhouse's MuJoCo Warp kernels into Warp's kernel cache (warp_kernels.py says why) and its learner compile
artifacts into the learner's compile cache folder (compile_artifacts.py).

Nothing is installed before every sha256 matched. The site folder is private (put on PYTHONPATH by the Makefile,
never the host's own site-packages) and stamped with the manifest's sha256 and the Python version, so later calls
skip the install and several parallel bench invocations share one install.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import OfflineError, bytecode, compile_artifacts, manifest, warp_kernels
from .wheellist import read_wheel_list

STAMP = ".wheelhouse-installed"
#: What a bench run imports from the wheelhouse or the host: a module the host lacks is named before a run starts.
IMPORT_CHECK = ("torch", "numpy", "unilab", "uni_rl", "mujoco", "hydra", "tensordict", "git", "unidiff")


def _check_for_host(record: dict, wheel_list: Path | None) -> None:
    """This interpreter runs the wheels; the wheelhouse must be built for it and from the current list."""
    have = f"{sys.version_info.major}.{sys.version_info.minor}"
    if record.get("python_version") != have:
        raise OfflineError(f"the wheelhouse is for Python {record.get('python_version')}, {sys.executable} is "
                           f"{have}: rebuild it with `make wheelhouse PYTHON_VERSION={have}`")
    entries = read_wheel_list(wheel_list) if wheel_list else read_wheel_list()
    listed = [e.spec for e in entries]
    if record.get("wheel_list") != listed:
        changed = sorted(set(listed) ^ set(record.get("wheel_list") or []))
        raise OfflineError(f"the wheelhouse was built from another wheel list (differs in {', '.join(changed[:4])}"
                           f"{' ...' if len(changed) > 4 else ''}): rebuild it with `make wheelhouse`")


def _import_check(site: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    code = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n"
    proc = subprocess.run([sys.executable, "-c", code, *IMPORT_CHECK], env=env, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OfflineError(f"with the wheelhouse installed, {sys.executable} still fails to import the stack "
                           f"({last}): the host must provide it (or add it to scripts/offline/gpu-host-wheels.txt "
                           f"and rebuild the wheelhouse)")


def _seed_warp_kernels(wheelhouse: Path, record: dict, site: Path) -> list[str]:
    """The wheelhouse's Warp kernels into the kernel cache Warp will use here (``WARP_CACHE_PATH`` or its default
    folder, as Warp itself resolves it with the installed site): the line to print, if the wheelhouse has any."""
    kernels = record.get("warp_kernels")
    if not kernels:
        return []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    version, cache = warp_kernels.cache_dir(sys.executable, env)
    if version != kernels["warp_version"]:
        return [f"Warp kernels: built for warp-lang {kernels['warp_version']}, this host runs {version}: not used"]
    copied, present = warp_kernels.seed(wheelhouse / warp_kernels.FOLDER, version, cache)
    planned = "; ".join(f"{t['task']} at {', '.join(map(str, t['worlds']))} worlds" for t in kernels.get("tasks", [])
                        ) or f"{', '.join(map(str, kernels.get('worlds', [])))} worlds"  # an older wheelhouse: G1's
    return [f"Warp kernels (sm_{', sm_'.join(map(str, kernels['archs']))}, {planned}): {copied} modules put into "
            f"{cache}, {present} already there"]


def _seed_compile_artifacts(wheelhouse: Path, record: dict, site: Path) -> list[str]:
    """The wheelhouse's compile artifacts into the learner's compile cache folder, where this host's torch and GPU
    are those they were built with: the line to print, if the wheelhouse has any."""
    if not record.get("compile_artifacts"):
        return []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)}
    folder = wheelhouse / compile_artifacts.FOLDER
    facts = compile_artifacts.host_facts([sys.executable], env)
    return [compile_artifacts.seed(folder, compile_artifacts.load(folder), facts, os.environ)]


def _compile_bytecode(site: Path) -> str:
    """The site's and the host's packages compiled where their bytecode is missing or stale: the line to print."""
    return bytecode.compile_roots(bytecode.host_roots(site)).line()


def install(wheelhouse: Path, site: Path, wheel_list: Path | None = None) -> list[str]:
    """Verify, then install into site unless it already holds this wheelhouse; returns the lines to print."""
    record = manifest.verify(wheelhouse)
    digest = manifest.file_sha256(wheelhouse / manifest.MANIFEST)
    _check_for_host(record, wheel_list)
    verified = f"wheelhouse {wheelhouse}: {len(record['files'])} files verified, {manifest.MANIFEST} sha256 {digest}"
    stamp = f"{digest} python {sys.version.split()[0]}\n"
    if (site / STAMP).is_file() and (site / STAMP).read_text(encoding="utf-8") == stamp:
        return [verified, f"site {site}: already installed", _compile_bytecode(site),
                *_seed_warp_kernels(wheelhouse, record, site), *_seed_compile_artifacts(wheelhouse, record, site)]
    if site.exists() and any(site.iterdir()) and not (site / STAMP).is_file():
        raise OfflineError(f"{site} exists and was not made from a wheelhouse: remove it or choose another "
                           f"OFFLINE_SITE=")
    wheels = sorted(str(wheelhouse / n) for n in record["files"] if n.startswith("wheels/") and n.endswith(".whl"))
    site.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{site.name}-installing-", dir=site.parent) as tmp:
        staged = Path(tmp) / "site"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
             "--disable-pip-version-check", "--quiet", "--target", str(staged), *wheels],
            capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            last = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
            raise OfflineError(f"pip could not install the wheelhouse into {site} (exit {proc.returncode}): {last}")
        _import_check(staged)
        (staged / STAMP).write_text(stamp, encoding="utf-8")
        if site.exists():
            shutil.rmtree(site)
        staged.rename(site)
    return [verified, f"site {site}: installed {len(wheels)} wheels (put it on PYTHONPATH)", _compile_bytecode(site),
            *_seed_warp_kernels(wheelhouse, record, site), *_seed_compile_artifacts(wheelhouse, record, site)]
