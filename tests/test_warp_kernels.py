"""MuJoCo Warp's CUDA kernels built ahead by `make wheelhouse` and put into the host's Warp kernel cache
(scripts/offline/warp_kernels.py, with unisim 0004's recorded calls and unisim 0004's cubin).

1. The plan is what an H200 loads: planned on Warp's CPU device at 256 worlds, it names every module the H200's
   256-world training run loaded (results/2026-12-04-h200-warp-kernel-cache, the run's log) but the broadphase
   kernel MuJoCo Warp makes for the reset's smaller scratch data, which the backend's build does not make either.
   Control: planned at 4096 worlds (G1's own default, planned in the same build), a kernel keyed on the world
   count (the broadphase) is another kernel, and the check fails.
   The same for Go2 Joystick Flat: its plan at 1024 worlds, its config's own default (planned though only 256 is
   given), names every module the H200's 1024-world run of it loaded (results/2026-12-07-h200-whole-run-go2,
   the device collector's run and log) but, as for G1, the broadphase of the reset's smaller scratch data. Its
   device env's ``set_const`` after a reset (``io``, the tile Cholesky of ``factor_m``/``solve_m``) is planned:
   G1's plan lacks those. Control: planned at 256 worlds, size-keyed kernels differ.
2. A module compiled ahead lands where Warp looks for it, as Warp names it: ``<id>/<id>.sm90.cubin`` with its
   ``.meta``, an ELF (cubin), in the folder of Warp's version; only the module asked for is compiled.
3. ``seed`` puts into the cache what it lacks, never overwrites what it holds, and leaves a cache of another
   Warp version alone; the cache folder is Warp's own answer (``WARP_CACHE_PATH`` honoured).
4. A wheelhouse whose list holds warp-lang refuses, in one line, a tree the series is not applied to.
5. The device env's own kernel, the env step's timestamp, is planned too, once (the same module at every world
   count and for both tasks), without building the env, and compiled ahead it lands as cubin like MuJoCo Warp's.
6. A task the table does not own is refused in one line; the host's line names each task and its world counts.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import G1_ASSETS, GO2_ASSETS, PROJECT, runnable_tree

sys.path.insert(0, str(PROJECT / "scripts"))

from offline import OfflineError, warp_kernels  # noqa: E402
from offline.build import WarpKernels, _applied_tree  # noqa: E402

H200_LOG = (PROJECT / "results" / "2026-12-04-h200-warp-kernel-cache" / "cubin"
            / "fresh-report-compile-behind-cubin-seeded.log.gz")
GO2_LOG = PROJECT / "results" / "2026-12-07-h200-whole-run-go2" / "whole-run" / "go2-device-log.txt.gz"
SCRATCH_BROADPHASE = "wp__nxn_broadphase__locals__kernel_cad8873c_cad8873"
GO2_SCRATCH_BROADPHASE = "wp__nxn_broadphase__locals__kernel_5d89c636_5d89c63"
#: Go2's device env's ``set_const`` after a reset: its ``io`` module, ``factor_m``'s and ``solve_m``'s tile Cholesky.
SET_CONST = {"wp_mujoco_warp._src.io_b4940be", "wp__tile_cholesky_factorize_block__locals__kernel_dccc1fac_2d1dc66",
             "wp__tile_cholesky_solve_block__locals__kernel_cc0baf95_1fbe0d2"}
G1 = "g1_walk_flat/mjwarp"
GO2 = "go2_joystick_flat/mjwarp"
#: The env step's timestamp kernel's module (flashsac_runtime.envs).
STAMPS = "flashsac_runtime.envs.step_stamps"


#: Modules the H200 run loaded under the name they had then: the row-wise reset's kernels, the same source (and
#: so the same hash) now in the project's own package.
RENAMED = {"unisim.backend.mjwarp.row_commit": "flashsac_runtime.mjwarp.row_commit"}


def h200_modules(log: Path = H200_LOG) -> set[str]:
    """The Warp module folders an H200 run loaded (``[<time>] Module <name> <hash> load on device ...``), by
    today's names."""
    text = gzip.decompress(log.read_bytes()).decode()
    return {f"wp_{RENAMED.get(name, name)}_{digest}"
            for name, digest in re.findall(r"^[ \d.]*Module (\S+) ([0-9a-f]{7}) load on device", text, re.M)}


def plan_for(record: dict, task: str, worlds: int) -> set[str]:
    """The module folders ``record`` planned for ``task`` at ``worlds``."""
    return {entry["id"] for entry in record["modules"] if f"{task}:{worlds}" in entry["planned_for"]}


@pytest.fixture(scope="module")
def planned(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict, Path]]:
    """The child's record for G1 given 256 worlds (compiling the backend's own module only) and for Go2 given 256
    worlds (compiling the env step's timestamp kernel only); each task is planned at its default too."""
    tree, overlay = applied_session
    out = {}
    for task, only in ((G1, "flashsac_runtime.mjwarp."), (GO2, STAMPS)):
        dest = tmp_path_factory.mktemp(f"warp-kernels-{task.split('_')[0]}")
        out[task] = (warp_kernels.build(dest, tree, overlay, [G1_ASSETS, GO2_ASSETS], tasks=(task,), worlds=(256,),
                                        archs=(90,), jobs=1, only=only), dest)
    return out


def test_each_task_is_planned_at_its_own_default_too(planned: dict[str, tuple[dict, Path]]) -> None:
    """The counts given plus the owner's own ``algo.num_envs`` from its composed config (Go2's 1024)."""
    assert planned[G1][0]["tasks"] == [{"task": G1, "worlds": [256, 4096], "default_worlds": 4096}]
    assert planned[GO2][0]["tasks"] == [{"task": GO2, "worlds": [256, 1024], "default_worlds": 1024}]


def test_the_plan_is_what_an_h200_loads(planned: dict[str, tuple[dict, Path]]) -> None:
    loaded = h200_modules()
    assert len(loaded) > 40 and SCRATCH_BROADPHASE in loaded
    record = planned[G1][0]
    assert loaded - plan_for(record, G1, 256) == set()  # the reset scratch's broadphase included
    assert loaded - plan_for(record, G1, 4096)  # the control: another world count, another kernel


def test_go2s_plan_is_what_an_h200_loads(planned: dict[str, tuple[dict, Path]]) -> None:
    """Go2's 1024-world run on an H200 (its device collector on) loaded 49 modules, 25 of them compiled there:
    its plan at 1024 worlds names every one, the reset scratch's broadphase and the device env's ``set_const``
    kernels included."""
    loaded = h200_modules(GO2_LOG)
    assert len(loaded) == 49 and GO2_SCRATCH_BROADPHASE in loaded and SET_CONST <= loaded
    record = planned[GO2][0]
    assert loaded - plan_for(record, GO2, 1024) == set()
    assert len(loaded - plan_for(record, GO2, 256)) > 1  # the control: another world count, another kernel
    assert not SET_CONST & plan_for(planned[G1][0], G1, 4096)  # G1's device env has no set_const: not planned


MOTION = "g1_motion_tracking/mjwarp"
FRESH = PROJECT / "results" / "2026-12-07-h100-fresh-numba-first-iteration"
#: The reset scratch's broadphase of motion tracking's 2048 worlds.
MOTION_SCRATCH_BROADPHASE = "wp__nxn_broadphase__locals__kernel_8023e4ad_8023e4a"


def compiled_there(log: Path) -> set[str]:
    """The Warp module folders a run compiled (not loaded from the cache) before its first iteration."""
    text = gzip.decompress(log.read_bytes()).decode()
    return {f"wp_{name}_{digest}" for name, digest in
            re.findall(r"^[ \d.]*Module (\S+) ([0-9a-f]{7}) load on device .*\(compiled\)", text, re.M)}


@pytest.fixture(scope="module")
def together(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One build of every task owner, as `make wheelhouse` makes it (256 worlds given; nothing compiled)."""
    tree, overlay = applied_session
    return warp_kernels.build(tmp_path_factory.mktemp("warp-kernels-all"), tree, overlay, [G1_ASSETS, GO2_ASSETS],
                              tasks=(G1, GO2, MOTION), worlds=(256,), archs=(90,), jobs=1, only="nothing:")


def test_tasks_built_together_are_planned_as_each_alone(planned: dict[str, tuple[dict, Path]], together: dict,
                                                        applied_session: tuple[Path, Path], tmp_path: Path) -> None:
    """Each task is planned in a process of its own, so a wheelhouse of every task plans for each what it plans
    alone. Control: one process planning G1 Walk Flat then Go2 gives Go2 another narrowphase (MuJoCo Warp makes it
    from the collision types of every model its process built)."""
    for task, counts in ((G1, (256, 4096)), (GO2, (256, 1024))):
        for count in counts:
            assert plan_for(together, task, count) == plan_for(planned[task][0], task, count), (task, count)
    tree, overlay = applied_session
    copy = runnable_tree(tree, tmp_path / "unilab")
    proc = subprocess.run([sys.executable, "-m", "offline.warp_kernels", "--tasks", G1, GO2, "--worlds", "256",
                           "--archs", "90", "--only", "nothing:"], cwd=copy,
                          env=warp_kernels._child_env(copy, overlay, tmp_path / "cache"),  # noqa: SLF001
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    one_process = json.loads(proc.stdout.strip().splitlines()[-1])
    alone = plan_for(planned[GO2][0], GO2, 1024)
    narrowphase = {name for name in plan_for(one_process, GO2, 1024) ^ alone if "narrowphase" in name}
    assert len(narrowphase) == 2, sorted(plan_for(one_process, GO2, 1024) ^ alone)


def test_the_plan_names_what_a_fresh_h100_compiled(together: dict) -> None:
    """On a fresh H100 whose wheelhouse planned every task in one process and no reset scratch, motion tracking's
    run (2048 worlds, its default) compiled two broadphases, its reset scratch's among them, and Go2's (1024) a
    narrowphase and its reset scratch's broadphase. Today's plan names all four."""
    motion = compiled_there(FRESH / "motion-device-fresh-log.txt.gz")
    go2 = compiled_there(FRESH / "go2-default-fresh-log.txt.gz")
    assert len(motion) == 2 and len(go2) == 2, (motion, go2)
    assert MOTION_SCRATCH_BROADPHASE in motion and GO2_SCRATCH_BROADPHASE in go2
    assert motion - plan_for(together, MOTION, 2048) == set()
    assert go2 - plan_for(together, GO2, 1024) == set()
    assert len(motion - plan_for(together, MOTION, 256)) == 2  # the control: another world count, other kernels


def test_an_unknown_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OfflineError, match=r"no Warp kernels are planned for g1_walk_rough/mjwarp: the task owners"):
        warp_kernels.build(tmp_path, tmp_path, tmp_path, [G1_ASSETS], tasks=("g1_walk_rough/mjwarp",))


def test_a_module_compiled_ahead_lands_where_warp_looks(planned: dict[str, tuple[dict, Path]]) -> None:
    record, dest = planned[G1]
    compiled = [entry for entry in record["modules"] if "files" in entry]
    assert compiled and {entry["module"] for entry in compiled} == {"flashsac_runtime.mjwarp.row_commit"}
    assert_lands_where_warp_looks(record, dest, compiled)


def assert_lands_where_warp_looks(record: dict, dest: Path, compiled: list[dict]) -> None:
    for entry in compiled:
        folder = dest / record["warp_version"] / entry["id"]
        assert entry["files"] == [f"{entry['id']}.sm90.cubin"]
        assert (folder / f"{entry['id']}.meta").is_file()
        assert (folder / entry["files"][0]).read_bytes()[:4] == b"\x7fELF"
    assert [p.name for p in dest.iterdir()] == [record["warp_version"]]
    assert len(list((dest / record["warp_version"]).iterdir())) == len(compiled)  # nothing else compiled
    assert not any(entry.get("failed") for entry in record["modules"])


def test_the_step_stamps_kernel_is_planned_once(planned: dict[str, tuple[dict, Path]]) -> None:
    """The env step's timestamp kernel (flashsac_runtime.envs, on by default) is built ahead too: one module, the same at
    every world count and task (it holds no count); compiled ahead it lands where Warp looks, as the physics' do."""
    ids = [[entry["id"] for entry in planned[task][0]["modules"] if entry["module"] == STAMPS] for task in (G1, GO2)]
    assert len(ids[0]) == 1 and ids[0] == ids[1], ids
    assert all(ids[0][0] in plan_for(planned[GO2][0], GO2, worlds) for worlds in (256, 1024))
    record, dest = planned[GO2]
    compiled = [entry for entry in record["modules"] if "files" in entry]
    assert [entry["id"] for entry in compiled] == ids[1]
    assert_lands_where_warp_looks(record, dest, compiled)


def test_seed_adds_what_the_cache_lacks_and_keeps_what_it_holds(tmp_path: Path) -> None:
    kernels = tmp_path / "warp-kernels"
    for version, module in (("1.16.0", "wp_a_1234567"), ("1.16.0", "wp_b_89abcde"), ("9.9.9", "wp_c_0000000")):
        (kernels / version / module).mkdir(parents=True)
        (kernels / version / module / f"{module}.sm90.cubin").write_bytes(b"\x7fELF built ahead")
    cache = tmp_path / "cache" / "1.16.0"
    (cache / "wp_a_1234567").mkdir(parents=True)
    (cache / "wp_a_1234567" / "wp_a_1234567.sm90.cubin").write_bytes(b"\x7fELF built here")
    assert warp_kernels.seed(kernels, "1.16.0", cache) == (1, 1)
    assert (cache / "wp_a_1234567" / "wp_a_1234567.sm90.cubin").read_bytes() == b"\x7fELF built here"
    assert (cache / "wp_b_89abcde" / "wp_b_89abcde.sm90.cubin").read_bytes() == b"\x7fELF built ahead"
    assert sorted(p.name for p in cache.iterdir()) == ["wp_a_1234567", "wp_b_89abcde"]  # no staging left
    assert warp_kernels.seed(kernels, "1.16.0", cache) == (0, 2)
    assert warp_kernels.seed(kernels, "2.0.0", tmp_path / "other") == (0, 0) and not (tmp_path / "other").exists()


def test_the_cache_folder_is_warps_own(tmp_path: Path) -> None:
    env = {**os.environ, "WARP_CACHE_PATH": str(tmp_path / "wc")}
    version, folder = warp_kernels.cache_dir(sys.executable, env)
    assert folder == (tmp_path / "wc" / version).resolve() and re.fullmatch(r"\d+\.\d+\.\d+", version)
    with pytest.raises(OfflineError, match="could not ask Warp for its kernel cache folder"):
        warp_kernels.cache_dir(sys.executable, {**env, "PYTHONPATH": str(tmp_path), "PYTHONNOUSERSITE": "1",
                                                "PYTHONHOME": str(tmp_path)})


def test_the_host_says_which_tasks_it_seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make setup OFFLINE=`'s line names each task and its world counts, as the wheelhouse records them."""
    from offline import host

    monkeypatch.setenv("WARP_CACHE_PATH", str(tmp_path / "wc"))
    version, _folder = warp_kernels.cache_dir(sys.executable)
    (tmp_path / "wh" / warp_kernels.FOLDER / version / "wp_a_1234567").mkdir(parents=True)
    tasks = [{"task": G1, "worlds": [256, 4096]}, {"task": GO2, "worlds": [256, 1024, 4096]}]
    record = {"warp_kernels": {"warp_version": version, "archs": [90], "tasks": tasks}}
    [line] = host._seed_warp_kernels(tmp_path / "wh", record, tmp_path / "site")  # noqa: SLF001
    assert line.startswith(f"Warp kernels (sm_90, {G1} at 256, 4096 worlds; {GO2} at 256, 1024, 4096 worlds): "
                           f"1 modules put into"), line
    assert (tmp_path / "wc" / version / "wp_a_1234567").is_dir()


def test_a_tree_without_the_series_is_refused(tmp_path: Path) -> None:
    (tmp_path / "unilab").mkdir()
    with pytest.raises(OfflineError, match=r"MuJoCo Warp's kernels are built from the applied tree.*make apply wheelhouse"):
        _applied_tree(WarpKernels(tree=tmp_path / "unilab"))
