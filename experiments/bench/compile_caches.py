"""Whether each compile cache a trainer reads was empty when it was launched.

Why: a run's start-up is minutes on a fresh machine and seconds on a warm one, so a start-up time means
little without the state of the caches it started from: Inductor's (FX graphs, AOTAutograd, kernels),
Triton's compiled kernels, the warm-up's compile artifacts (uni_rl 0008, ``FLASHSAC_COMPILE_CACHE_DIR``),
torch's JIT-built C++ extensions (the replay transfer's native H2D extension, uni_rl 0013), Warp's kernel
cache (MuJoCo Warp's kernels, built on a machine's first MJWarp run) and the CUDA driver's compile cache (the
GPU code the driver compiles from PTX at a module's load: with it empty, Warp's PTX modules took 26-27 s to load
on a fresh H200, results/2026-12-04-h200-warp-kernel-cache). Each folder is resolved from the
environment the trainer is given, by the rules torch, uni_rl and Warp apply (the tests compare with their own
functions), and only read: nothing is created. ``empty`` means no file under the folder (a
missing folder is empty). Called by ``benchmark_flashsac_training.py`` just before it starts the trainer.
"""

from __future__ import annotations

import getpass
import os
import pwd
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from offline.bytecode import is_current  # noqa: E402  (the setup's own staleness check)

#: The caches, in the order the report lists them.
CACHES = ("inductor", "triton", "compile_artifacts", "torch_extensions", "warp_kernels", "cuda_driver",
          "python_bytecode")
#: torch's packages whose modules the bytecode probe samples: the learner's construction imports them.
BYTECODE_SAMPLE = ("_dynamo", "_inductor")


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or pwd.getpwuid(os.getuid()).pw_dir)


def _user(env: Mapping[str, str]) -> str:
    """getpass.getuser() for this environment (its variables, then the password database)."""
    for key in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        if env.get(key):
            return env[key]
    return getpass.getuser()


def _temp_dir(env: Mapping[str, str]) -> Path:
    """tempfile.gettempdir() for this environment: the first of TMPDIR, TEMP, TMP naming a folder, else /tmp."""
    for key in ("TMPDIR", "TEMP", "TMP"):
        if env.get(key) and Path(env[key]).is_dir():
            return Path(env[key])
    return Path("/tmp")


def folders(env: Mapping[str, str], *, torch_cuda: str | None,
            warp_version: str | None = None) -> dict[str, Path | None]:
    """Each cache's folder for a trainer started with ``env`` (None: that cache is off, or Warp is absent).

    ``torch_cuda`` is the trainer's ``torch.version.cuda`` (it names torch's extension folder);
    ``warp_version`` its warp-lang version (Warp keeps one kernel folder per version).
    """
    inductor = env.get("TORCHINDUCTOR_CACHE_DIR")
    inductor_dir = Path(inductor) if inductor is not None else (
        _temp_dir(env) / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", _user(env))))
    triton = env.get("TRITON_CACHE_DIR")
    artifacts = env.get("FLASHSAC_COMPILE_CACHE_DIR")
    artifacts_dir = None if artifacts == "" else Path(artifacts) if artifacts else (
        Path(env.get("XDG_CACHE_HOME") or _home(env) / ".cache") / "flashsac-overlay" / "compile")
    extensions = env.get("TORCH_EXTENSIONS_DIR")
    if extensions is not None:
        extensions_dir = Path(extensions)
    else:
        build = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_" + (
            "cpu" if torch_cuda is None else f"cu{torch_cuda.replace('.', '')}")
        root = Path(env.get("XDG_CACHE_HOME", str(_home(env) / ".cache"))) / "torch_extensions"
        extensions_dir = Path(os.path.realpath(root)) / build
    warp = env.get("WARP_CACHE_PATH")
    warp_dir = None if warp_version is None else (
        Path(os.path.realpath(warp)) if warp is not None
        else Path(env.get("XDG_CACHE_HOME", str(_home(env) / ".cache"))) / "warp") / warp_version
    # The driver's rule (CUDA's environment variables): CUDA_CACHE_PATH, else ~/.nv/ComputeCache; off when disabled.
    driver_dir = None if env.get("CUDA_CACHE_DISABLE") == "1" else (
        Path(env["CUDA_CACHE_PATH"]) if env.get("CUDA_CACHE_PATH") else _home(env) / ".nv" / "ComputeCache")
    return {
        "inductor": inductor_dir,
        # Inductor compiles Triton kernels into its own folder unless TRITON_CACHE_DIR names another.
        "triton": Path(triton) if triton is not None else inductor_dir / "triton",
        "compile_artifacts": artifacts_dir,
        "torch_extensions": extensions_dir,
        "warp_kernels": warp_dir,
        "cuda_driver": driver_dir,
    }


def contents(folder: Path | None) -> dict[str, Any]:
    """Files and bytes under ``folder`` and whether it holds none; an unreadable entry is skipped."""
    if folder is None:
        return {"path": None, "files": 0, "bytes": 0, "empty": None, "off": True}
    files = size = 0
    for root, _, names in os.walk(folder):
        for name in names:
            try:
                size += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
    return {"path": str(folder), "files": files, "bytes": size, "empty": files == 0}


def bytecode(env: Mapping[str, str], torch_dir: Path) -> dict[str, Any]:
    """How many of ``torch._dynamo``'s and ``torch._inductor``'s top-level modules have current bytecode where a
    trainer started with ``env`` looks for it (Python's own timestamp or hash check, scripts/offline/bytecode.py)."""
    import importlib.util

    prefix = env.get("PYTHONPYCACHEPREFIX") or None
    saved = sys.pycache_prefix
    sys.pycache_prefix = os.path.abspath(prefix) if prefix else None
    try:
        sources = sorted(p for name in BYTECODE_SAMPLE for p in (torch_dir / name).glob("*.py"))
        current = sum(is_current(p, importlib.util.cache_from_source(str(p))) for p in sources)
    finally:
        sys.pycache_prefix = saved
    return {"path": prefix or "beside the sources", "files": current, "bytes": 0, "empty": current == 0,
            "sampled": len(sources), "dont_write_bytecode": bool(env.get("PYTHONDONTWRITEBYTECODE"))}


def probe(env: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The state of every cache a trainer started with ``env`` finds (this interpreter's torch and Warp name
    the extension and kernel folders: the trainer runs on them too)."""
    import importlib.metadata

    import torch

    try:
        warp_version: str | None = importlib.metadata.version("warp-lang")
    except importlib.metadata.PackageNotFoundError:
        warp_version = None
    found = folders(env, torch_cuda=torch.version.cuda, warp_version=warp_version)
    return {**{name: contents(folder) for name, folder in found.items()},
            "python_bytecode": bytecode(env, Path(torch.__file__).parent)}


def cold(caches: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The caches that were empty at launch (a cache that is off is not listed)."""
    return [name for name in CACHES if (caches.get(name) or {}).get("empty") is True]
