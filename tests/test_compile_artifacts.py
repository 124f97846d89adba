"""The learner's compile artifacts carried to a host that never compiled it (scripts/offline/compile_artifacts.py).

Building them needs a GPU (a CPU host is one line and writes nothing); what the CPU can check is everything around
the files: the settings they are built at are the bench's, the wheelhouse copies them only as recorded, and the
host puts them into the learner's compile cache folder only where its torch and GPU are those they were built with.
The artifact files here are stand-in bytes: these steps copy and hash them, never read them (torch's loader does, on
the GPU host).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT, make

sys.path.insert(0, str(PROJECT / "experiments" / "bench"))
from offline import OfflineError, compile_artifacts  # noqa: E402
from offline.build import _copy_compile_artifacts  # noqa: E402
from patchset.api import file_sha256  # noqa: E402

import bench_configs  # noqa: E402

FACTS = {"torch": "2.11.0+cu130", "triton": "3.5.0", "cuda": "13.0", "gpu": "NVIDIA H100 80GB HBM3", "arch": "sm_90"}


def artifacts(folder: Path) -> dict:
    """An artifacts folder as `make compile-artifacts` leaves it: two files and their record."""
    folder.mkdir()
    files = {}
    for name in ("artifacts-0123456789abcdef.bin", "artifacts-fedcba9876543210.bin"):
        (folder / name).write_bytes(name.encode() * 64)
        files[name] = file_sha256(folder / name)
    record = {**FACTS, "settings": list(compile_artifacts.SETTINGS), "task": compile_artifacts.TASK, "files": files}
    (folder / compile_artifacts.RECORD).write_text(json.dumps(record))
    return record


def test_a_host_without_cuda_builds_nothing_and_says_so(tmp_path: Path) -> None:
    dest = tmp_path / "artifacts"
    proc = make("compile-artifacts", f"COMPILE_ARTIFACTS={dest}")
    assert proc.returncode != 0
    assert "compile-artifacts: error: the compile artifacts are built on a GPU host: this host has no CUDA " \
           "device for torch" in proc.stderr, proc.stderr
    assert not dest.exists()


def test_the_collector_is_one_of_the_trainers(tmp_path: Path) -> None:
    dest = tmp_path / "artifacts"
    accepted = make("compile-artifacts", f"COMPILE_ARTIFACTS={dest}", "COMPILE_TASK=go2_joystick_flat/mjwarp",
                    "COMPILE_COLLECTOR=device")
    assert "this host has no CUDA device for torch" in accepted.stderr, accepted.stderr
    # control: a collector the trainer does not have is refused before anything runs
    refused = make("compile-artifacts", f"COMPILE_ARTIFACTS={dest}", "COMPILE_COLLECTOR=sideways")
    assert refused.returncode != 0 and "invalid choice: 'sideways'" in refused.stderr, refused.stderr
    assert not dest.exists()


def test_the_settings_are_the_benchs() -> None:
    """The report's setting at 2/1/1 and UniLab's defaults, as the bench's table of settings holds them."""
    report = bench_configs.SETTINGS["report"]
    expected = {f"algo.{key}={value}" for key, value in report.values} | {"algo.updates_per_step=2"}
    assert set(compile_artifacts.SETTINGS["report"]) == expected
    assert compile_artifacts.SETTINGS["unilab-default"] == bench_configs.SETTINGS["unilab-default"].values == ()
    assert bench_configs.SCHEDULES[0].label == "2/1/1"


def test_the_host_gets_them_only_for_its_torch_and_gpu(tmp_path: Path) -> None:
    record = artifacts(tmp_path / "built")
    carried = tmp_path / "wheelhouse-folder"
    assert _copy_compile_artifacts(tmp_path / "built", carried)["gpu"] == FACTS["gpu"]
    loaded = compile_artifacts.load(carried)
    cache = tmp_path / "cache"
    env = {compile_artifacts.CACHE_DIR_ENV: str(cache)}
    # Another torch, or another GPU, or no GPU: one line, nothing put there (the control).
    for facts in ({**FACTS, "torch": "2.8.0+cu128"}, {**FACTS, "gpu": "NVIDIA H200"}, None):
        line = compile_artifacts.seed(carried, loaded, facts, env)
        assert "not used" in line and not cache.exists(), line
    line = compile_artifacts.seed(carried, loaded, FACTS, env)
    assert line.endswith(f"2 put into {cache}, 0 already there"), line
    assert {p.name: file_sha256(p) for p in cache.iterdir()} == record["files"]
    # A file already in the cache is never overwritten; an empty cache setting turns the cache off.
    mine = cache / next(iter(record["files"]))
    mine.write_bytes(b"this host's own")
    assert compile_artifacts.seed(carried, loaded, FACTS, env).endswith("0 put into " + str(cache) + ", 2 already there")
    assert mine.read_bytes() == b"this host's own"
    assert "the compile cache is off" in compile_artifacts.seed(carried, loaded, FACTS,
                                                                {compile_artifacts.CACHE_DIR_ENV: ""})


def test_an_altered_or_unrecorded_folder_is_refused(tmp_path: Path) -> None:
    record = artifacts(tmp_path / "built")
    (tmp_path / "built" / next(iter(record["files"]))).write_bytes(b"changed")
    with pytest.raises(OfflineError, match="differs from its record: build the artifacts again"):
        compile_artifacts.load(tmp_path / "built")
    with pytest.raises(OfflineError, match="differs from its record"):
        _copy_compile_artifacts(tmp_path / "built", tmp_path / "carried")
    (tmp_path / "empty").mkdir()
    with pytest.raises(OfflineError, match="is missing or unreadable"):
        compile_artifacts.load(tmp_path / "empty")


def test_the_cache_folder_is_the_warm_ups(patched_uni_rl_root: Path, tmp_path: Path) -> None:
    """The folder the files go to is the one the learner's warm-up reads (uni_rl 0008's compile_cache_file), for a
    set folder and for the default."""
    code = ("import sys; from uni_rl.algos.common.compile import compile_cache_file; "
            "print(compile_cache_file('k').parent)")
    for env in ({compile_artifacts.CACHE_DIR_ENV: str(tmp_path / "set")}, {"XDG_CACHE_HOME": str(tmp_path / "xdg")},
                {"HOME": str(tmp_path / "home")}):
        full = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(patched_uni_rl_root), **env}
        proc = subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert Path(proc.stdout.strip()) == compile_artifacts.cache_dir(full), env
