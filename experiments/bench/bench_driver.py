"""What the matrix and parity drivers share: preconditions, the reference learner, one run.

Both drivers call the single-run script as a subprocess per run, never in-process:
each configuration imports a different ``uni_rl`` and Inductor state must not leak
from one run into the next.

Imported by ``bench_matrix.py`` (``make bench``) and ``bench_parity.py`` (``make bench-parity``).
"""

from __future__ import annotations

import argparse
import datetime
import getpass
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bench_configs
import bench_env  # also puts scripts/ (the applier's patchset package) on sys.path
from bench_env import BenchSetupError
import run_files
from bench_records import load_json_object
from patchset.api import PatchsetError, extract_wheel_package, pinned_artifact

SINGLE_RUN = bench_env.BENCH_DIR / "benchmark_flashsac_training.py"
BASELINE_DIR = bench_env.BASELINE_UNI_RL_DIR
PRISTINE_TREE_DIR = bench_env.PRISTINE_TREE_DIR


#: The <machine> and <study> of results/<date>-<machine>-<study>/, as the results index accepts them
#: (tables/results_index.py builds its folder-name rule from these two).
MACHINE_TOKEN = re.compile(r"[a-z0-9]+")
STUDY_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def machine_token(gpu: str, gpus: int) -> str:
    """'NVIDIA H200' on one GPU -> 'h200', on two -> 'h200x2': the default <machine> of a results folder.

    The model without the vendor, as the committed evidence names its machines, and the number of GPUs the
    invocation sees when there are several, so that a folder's name says what it ran on.
    """
    model = re.sub(r"[^a-z0-9]", "", re.sub(r"^\s*nvidia\b", "", gpu.lower())) or "gpu"
    return f"{model}x{gpus}" if gpus > 1 else model


def this_machine(gpu: str) -> str:
    """The default <machine> of this invocation: its GPU model and how many GPUs it sees."""
    import torch

    return machine_token(gpu, torch.cuda.device_count())


def name_part(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """An argparse type for --machine / --study: a name the results index accepts, or a usage error."""
    def check(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(
                f"{what} {text!r} must match {pattern.pattern} (results/<date>-<machine>-<study>/)")
        return text
    return check


def results_dir(root: Path, machine: str, study: str) -> Path:
    """A fresh results/<date>-<machine>-<study>/ (a second invocation the same day gets -2, -3...).

    Named as committed evidence is named, so that a run's folder can be committed as it is and indexed.
    """
    base = f"{datetime.date.today().isoformat()}-{machine}-{study}"
    candidate, n = root / base, 1
    while candidate.exists():
        n += 1
        candidate = root / f"{base}-{n}"
    (candidate / "runs").mkdir(parents=True)
    return candidate


def prepare_baseline(explicit_dir: Path | None, wheel: Path | None) -> Path:
    """A folder whose ``uni_rl/`` is the pristine 1.3.2 package, extracted once from the verified wheel.

    The wheel comes through the applier's own chain (given path, else cache, else download; sha256 always
    checked against VERSIONS.env). Extracted under the git-ignored work/ so that no uni_rl source is committed.
    """
    if explicit_dir is not None:
        if not (explicit_dir / "uni_rl" / "__init__.py").is_file():
            raise BenchSetupError(f"--baseline-uni-rl {explicit_dir} holds no uni_rl/ package")
        return explicit_dir.resolve()
    pins = bench_env.PINS
    stamp = BASELINE_DIR / ".wheel-sha256"
    want = pins["UNILAB_RL_BASE_WHEEL_SHA256"]
    if stamp.is_file() and stamp.read_text().strip() == want and (BASELINE_DIR / "uni_rl").is_dir():
        return BASELINE_DIR  # extracted earlier from the verified wheel (also what an offline GPU machine uses)
    try:
        verified = pinned_artifact(pins["UNILAB_RL_BASE_WHEEL"], want, wheel)
    except PatchsetError as exc:
        raise BenchSetupError(f"{exc} (or pass --baseline-uni-rl)") from exc
    shutil.rmtree(BASELINE_DIR / "uni_rl", ignore_errors=True)
    extract_wheel_package(verified, "uni_rl", BASELINE_DIR)
    stamp.write_text(want + "\n")
    return BASELINE_DIR


def prepare_pristine_tree(sdist: Path | None = None) -> Path:
    """The unpatched UniLab 1.3.2 tree the references train on, made once from the verified sdist.

    The references must be what a user has without this project: the stock learner on the stock tree.
    Since the series patches UniLab's collector too, running them on the applied tree would credit
    them with our collector work. The sdist unpacked as it is (no git: nothing is applied to it),
    under the git-ignored work/ (an offline GPU host reuses it).
    """
    pins = bench_env.PINS
    want = pins["UNILAB_SDIST_SHA256"]
    stamp = PRISTINE_TREE_DIR.parent / f".{PRISTINE_TREE_DIR.name}.sha256"
    if stamp.is_file() and stamp.read_text().strip() == want and (PRISTINE_TREE_DIR / bench_env.TRAIN_SCRIPT_REL).is_file():
        return PRISTINE_TREE_DIR
    try:
        verified = pinned_artifact(pins["UNILAB_SDIST"], want, sdist)
    except PatchsetError as exc:
        raise BenchSetupError(str(exc)) from exc
    shutil.rmtree(PRISTINE_TREE_DIR, ignore_errors=True)
    PRISTINE_TREE_DIR.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=PRISTINE_TREE_DIR.parent) as tmp:
        with tarfile.open(verified) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir())
        top.rename(PRISTINE_TREE_DIR)
    stamp.write_text(want + "\n")
    return PRISTINE_TREE_DIR


def inductor_cache_empty() -> bool:
    """Whether Inductor's on-disk cache is empty: the first run then pays a cold compile.

    A user's first run on a fresh machine pays the cold compile; this records whether a run
    really was cold, so its start-up time is read as such.
    """
    configured = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    try:
        user = getpass.getuser()  # what torch._inductor uses for its default cache folder
    except (KeyError, OSError):
        user = "unknown"
    cache = Path(configured) if configured else Path(tempfile.gettempdir()) / f"torchinductor_{user}"
    return not cache.is_dir() or not any(cache.iterdir())


def run_checks(commands: Sequence[tuple[str, str]], cwd: Path) -> dict[str, Any]:
    """Run the numerics / replay-stability checks on this machine; their pass flags go in every run JSON."""
    results: dict[str, Any] = {}
    (cwd / "work" / "bench-checks").mkdir(parents=True, exist_ok=True)  # where the default checks write
    for name, command in commands:
        print(f"[bench] check {name}: {command}", flush=True)
        started = time.monotonic()
        proc = subprocess.run(command, shell=True, cwd=cwd)
        results[name] = {"passed": proc.returncode == 0, "returncode": proc.returncode,
                         "command": command, "wall_s": round(time.monotonic() - started, 1)}
    return results


def parse_check(text: str) -> tuple[str, str]:
    """``NAME=COMMAND`` of --check."""
    name, sep, command = text.partition("=")
    if not sep or not name or not command:
        raise BenchSetupError(f"--check wants NAME=COMMAND, got {text!r}")
    return name, command


@dataclass
class RunSpec:
    """One planned run of the single-run script; ``updates_per_step`` None: the setting's tree value.

    ``collector``: a key of ``bench_configs.COLLECTORS`` (who steps the env).
    """

    config: str
    updates_per_step: int | None
    setting: str = "report"
    seed: int | None = None
    sim: str = "mujoco"
    collector: str = "host"
    extra: list[str] = field(default_factory=list)


@dataclass
class Progress:
    """Overall progress across runs, printed between the runs' live panels."""

    total: int
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    def line(self, what: str) -> str:
        elapsed = time.monotonic() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        eta_text = f", ETA {eta / 60:.0f} min" if eta is not None else ""
        return f"[bench {self.done + 1}/{self.total}] {what} (elapsed {elapsed / 60:.1f} min{eta_text})"


def single_run_argv(
    spec: RunSpec, *, common: Sequence[str], output: Path, run_dir: Path,
) -> list[str]:
    """Command line of the single-run script for one planned run."""
    argv = [sys.executable, str(SINGLE_RUN), *common, "--config", spec.config, "--setting", spec.setting,
            "--backend", spec.sim, "--collector", spec.collector, "--output", str(output), "--run-dir", str(run_dir)]
    if spec.updates_per_step is not None:
        argv += ["--updates-per-step", str(spec.updates_per_step)]
    if spec.seed is not None:
        argv += ["--seed", str(spec.seed)]
    return argv + spec.extra


def ensure_record(output: Path, spec: RunSpec, schedule_label: str, code: int) -> None:
    """A failed run that could not write its JSON still appears in the summary, as failed."""
    if output.exists():
        return
    run_files.write_run(output, {
        "status": "failed", "returncode": code, "config": spec.config, "setting": spec.setting, "backend": spec.sim,
        "collector": bench_configs.COLLECTORS[spec.collector].recorded,
        "training_config": {"schedule": schedule_label, "updates_per_step": spec.updates_per_step, "seed": spec.seed},
        "error": f"the single-run script exited {code} before writing its JSON (see the log above)",
    })


def retry_cold_reference(argv: Sequence[str], output: Path, progress: Progress, what: str) -> int:
    """Run a failed upstream-reference run once more; the failed attempt is kept inside the new record.

    Upstream unilab-rl 1.4.0 compiles its first update while the collector waits at most
    30 s for a tick: on a cold Inductor cache that update takes longer and the run dies
    (``Timed out waiting for off-policy inference tick``). Its attempt fills the cache,
    so a second attempt measures the steady state; the report lists the failed attempt.
    """
    first = load_json_object(output) or {}
    output.unlink(missing_ok=True)
    progress.total += 1
    code = execute(argv, progress, f"{what}, again (its failed attempt warmed the Inductor cache)")
    record = load_json_object(output)
    if record is not None:
        keep = ("status", "returncode", "timed_out", "wall_s", "error")
        record["earlier_attempts"] = [{key: first.get(key) for key in keep}]
        run_files.write_run(output, record)
    return code


def execute(argv: Sequence[str], progress: Progress, what: str) -> int:
    """Run one benchmark subprocess with the terminal handed through (its Rich panel stays live)."""
    print("\n" + progress.line(what), flush=True)
    print("$ " + shlex.join(argv), flush=True)
    code = subprocess.call(list(argv))
    progress.done += 1
    print(f"[bench {progress.done}/{progress.total}] {what}: {'ok' if code == 0 else f'FAILED (exit {code})'}", flush=True)
    return code
