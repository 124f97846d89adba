"""Shared fixtures: the real pinned artifacts (downloaded once, sha256-verified, cached under .cache/),
pristine UniLab trees made from the sdist, and the real applier run as a subprocess, as users run it."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "scripts"))

from patchset.fetch import pinned_artifact  # noqa: E402
from patchset.paths import cache_dir  # noqa: E402
from patchset.pins import load_pins  # noqa: E402
from patchset.trees import create_embedded_tree, extract_wheel_package  # noqa: E402

CONFIG = "src/unilab/conf/flashsac/config.yaml"
#: The G1 meshes UniLab would download from Hugging Face: test data beside the project (CI has it there).
G1_ASSETS = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-g1-assets.tar.xz"
#: The Go2 meshes of the Go2 joystick scene, the same way. One of them, base_4.obj, is a visual-only placeholder
#: (no collision, the body's inertia given explicitly): the simulated physics are the real model's (its README).
GO2_ASSETS = PROJECT.parent / "shared" / "assets" / "unilab-1.3.2-go2-assets.tar.xz"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "extended: left out of `make test` (real Inductor compiles on the CPU, the longest end-to-end runs "
        "whose guarantee a default test also checks; docs/tests.md); `make test-extended` runs it")


def runnable_tree(source: Path, dest: Path) -> Path:
    """A copy of a UniLab tree with the G1 and Go2 meshes unpacked into src/unilab/assets (never committed)."""
    for archive in (G1_ASSETS, GO2_ASSETS):
        if not archive.is_file():
            raise FileNotFoundError(f"{archive.name} not found at {archive.parent} (CI provides it at "
                                    f"<project>/../shared/assets/)")
    shutil.copytree(source, dest, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for archive in (G1_ASSETS, GO2_ASSETS):
        with tarfile.open(archive) as tar:
            tar.extractall(dest / "src" / "unilab" / "assets", filter="data")
    return dest


@pytest.fixture(scope="session")
def pins() -> dict[str, str]:
    return load_pins()


@pytest.fixture(scope="session")
def sdist(pins: dict[str, str]) -> Path:
    return pinned_artifact(pins["UNILAB_SDIST"], pins["UNILAB_SDIST_SHA256"])


@pytest.fixture(scope="session")
def wheel(pins: dict[str, str]) -> Path:
    return pinned_artifact(pins["UNILAB_RL_BASE_WHEEL"], pins["UNILAB_RL_BASE_WHEEL_SHA256"])


@pytest.fixture(scope="session")
def pristine_template(tmp_path_factory: pytest.TempPathFactory, sdist: Path) -> Path:
    """One pristine UniLab git tree per session; tests copy it (copying is much cheaper than unpacking)."""
    root = tmp_path_factory.mktemp("template") / "unilab"
    create_embedded_tree(sdist, root)
    return root


@pytest.fixture
def checkout(tmp_path: Path, pristine_template: Path) -> Path:
    """A fresh pristine UniLab checkout (git repo from the pinned sdist) in a path with spaces."""
    dest = tmp_path / "my unilab checkout"
    shutil.copytree(pristine_template, dest, symlinks=True)
    return dest


def make_overlay(dest: Path) -> Path:
    """A private overlay dir holding the committed runtime files, so tests never touch the project's."""
    dest.mkdir()
    for name in ("sitecustomize.py", "flashsac_provenance.py"):
        shutil.copy2(PROJECT / "overlay" / name, dest / name)
    return dest


@pytest.fixture
def overlay(tmp_path: Path) -> Path:
    return make_overlay(tmp_path / "overlay")


def patchset_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ALLOW_DRIFT", "ALLOW_OTHER_COMMIT", "FORCE", "PATCHSET_FAULT_AT", "PATCHSET_FAULT_TRACE")}
    env["PYTHONPATH"] = str(PROJECT / "scripts")
    env["PATCHSET_CACHE"] = str(cache_dir())
    env.update(extra)
    return env


Runner = Callable[..., subprocess.CompletedProcess]


def patchset(overlay: Path, command: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run `python -m patchset <command> --overlay <overlay> ...` as a user would; return the completed process."""
    return subprocess.run(
        [sys.executable, "-m", "patchset", command, "--overlay", str(overlay), *args],
        env=patchset_env(**(env or {})), capture_output=True, text=True, timeout=300, check=False,
    )


@pytest.fixture
def run_patchset(overlay: Path) -> Runner:
    """patchset() bound to the test's private overlay."""
    return lambda command, *args, env=None: patchset(overlay, command, *args, env=env)


def tree_hashes(root: Path) -> dict[str, str]:
    """sha256 of every file under root except git's own bookkeeping, plus each file's mode."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".git" not in p.relative_to(root).parts and "__pycache__" not in p.parts:
            out[str(p.relative_to(root))] = f"{hashlib.sha256(p.read_bytes()).hexdigest()} {oct(p.stat().st_mode)}"
    return out


@pytest.fixture(scope="session")
def pristine_uni_rl_root(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A dir holding the unpatched uni_rl of the pinned unilab-rl 1.3.2 wheel."""
    root = tmp_path_factory.mktemp("pristine_uni_rl")
    extract_wheel_package(wheel, "uni_rl", root)
    return root


@pytest.fixture(scope="session")
def applied_session(tmp_path_factory: pytest.TempPathFactory, pristine_template: Path) -> tuple[Path, Path]:
    """One checkout + overlay with the whole series applied by the real applier, shared read-only by tests."""
    base = tmp_path_factory.mktemp("applied")
    checkout = base / "unilab"
    shutil.copytree(pristine_template, checkout, symlinks=True)
    overlay = make_overlay(base / "overlay")
    proc = patchset(overlay, "apply", "--unilab", str(checkout))
    assert proc.returncode == 0, proc.stderr
    return checkout, overlay


@pytest.fixture(scope="session")
def patched_unilab_root(applied_session: tuple[Path, Path]) -> Path:
    return applied_session[0]


@pytest.fixture(scope="session")
def patched_uni_rl_root(applied_session: tuple[Path, Path]) -> Path:
    """The overlay dir: holds the patched uni_rl (and the provenance hook)."""
    return applied_session[1]


def make(*args: str, cwd: Path = PROJECT, **extra: str) -> subprocess.CompletedProcess:
    """`make ARGS` in the project (or a copy of it, cwd) as CI runs it: no inherited make or Python paths, pip
    offline on the cache; extra: more environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "PYTHONPATH")}
    env.update(PATCHSET_CACHE=str(cache_dir()), PIP_NO_INDEX="1", PIP_FIND_LINKS=str(cache_dir()))
    env.update(extra)
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


#: Independent child processes run side by side, one per core: most of this suite's time is single-threaded
#: children (imports, one env, one learner), so on CI's 2 cores two of them take the time of one.
CORES = max(2, os.cpu_count() or 2)
#: The environment of a child that runs beside others and does not set its own torch threads: one OpenMP thread.
#: Two children with a thread per core each spin for the cores (a numerics worker pair on 2 cores: 97 s of CPU
#: instead of 26), and their small tensors gain nothing from a second thread.
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


class SideBySide:
    """The slow, independent runs of one test module, started together (CORES at a time) when the module's first
    test asks, so that each test then takes its own result instead of waiting for its run alone.

    `runs` maps a test's function name to the call that makes its result; only runs whose test is selected start
    (`pytest -k` runs no others), in the module's order. `shared` runs (several tests read them) start first,
    always. A run's exception is raised in each test that reads it.
    """

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._pool = ThreadPoolExecutor(max_workers=CORES)
        self._shared: dict[str, Future] = {}
        self._futures: dict[str, Future] = {}

    def start(self, runs: dict[str, Callable[[], Any]],
              shared: dict[str, Callable[[], Any]] | None = None) -> SideBySide:
        """Start the shared runs, then the selected tests' runs (a run may wait for a shared one)."""
        module = self._request.module
        selected = {item.originalname for item in self._request.session.items
                    if getattr(item, "module", None) is module}
        unknown = set(runs) - {name for name in dir(module) if name.startswith("test_")}
        assert not unknown, f"runs for no test of {module.__name__}: {sorted(unknown)}"
        self._shared = {name: self._pool.submit(run) for name, run in (shared or {}).items()}
        self._futures = {name: self._pool.submit(run) for name, run in runs.items() if name in selected}
        return self

    def result(self, request: pytest.FixtureRequest) -> Any:
        """The result of the run for the test that asks."""
        return self._futures[request.node.originalname].result()

    def shared(self, name: str) -> Any:
        """The result of a shared run."""
        return self._shared[name].result()

    def close(self) -> None:
        """Wait for the started runs, drop those not started (after a failure with -x, say)."""
        self._pool.shutdown(wait=True, cancel_futures=True)


def side_by_side(*calls: Callable[[], Any]) -> list[Any]:
    """Independent calls of one test (each mostly a child process), CORES at a time; their results in order."""
    with ThreadPoolExecutor(max_workers=CORES) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]
