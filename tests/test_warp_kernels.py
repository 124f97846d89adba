"""MuJoCo Warp's CUDA kernels built ahead by `make wheelhouse` and put into the host's Warp kernel cache
(scripts/offline/warp_kernels.py, with unisim 0004's recorded calls and unisim 0004's cubin).

1. The plan is what an H200 loads: planned on Warp's CPU device at 256 worlds, it names every module the H200's
   256-world training run loaded (results/2026-12-04-h200-warp-kernel-cache, the run's log) but the broadphase
   kernel MuJoCo Warp makes for the reset's smaller scratch data, which the backend's build does not make either.
   Control: planned at 4096 worlds, a kernel keyed on the world count (the broadphase) is another kernel, and
   the check fails.
2. A module compiled ahead lands where Warp looks for it, as Warp names it: ``<id>/<id>.sm90.cubin`` with its
   ``.meta``, an ELF (cubin), in the folder of Warp's version; only the module asked for is compiled.
3. ``seed`` puts into the cache what it lacks, never overwrites what it holds, and leaves a cache of another
   Warp version alone; the cache folder is Warp's own answer (``WARP_CACHE_PATH`` honoured).
4. A wheelhouse whose list holds warp-lang refuses, in one line, a tree the series is not applied to.
5. The device env's own kernel, the env step's timestamp, is planned too, once (the same module at every world
   count), without building the env, and compiled ahead it lands as cubin like MuJoCo Warp's.
"""

from __future__ import annotations

import gzip
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import G1_ASSETS, PROJECT

sys.path.insert(0, str(PROJECT / "scripts"))

from offline import OfflineError, warp_kernels  # noqa: E402
from offline.build import WarpKernels, _applied_tree  # noqa: E402

H200_LOG = (PROJECT / "results" / "2026-12-04-h200-warp-kernel-cache" / "cubin"
            / "fresh-report-compile-behind-cubin-seeded.log.gz")
SCRATCH_BROADPHASE = "wp__nxn_broadphase__locals__kernel_cad8873c_cad8873"
#: The env step's timestamp kernel's module (flashsac_runtime.envs).
STAMPS = "flashsac_runtime.envs.step_stamps"


#: Modules the H200 run loaded under the name they had then: the row-wise reset's kernels, the same source (and
#: so the same hash) now in the project's own package.
RENAMED = {"unisim.backend.mjwarp.row_commit": "flashsac_runtime.mjwarp.row_commit"}


def h200_modules() -> set[str]:
    """The Warp module folders the H200 run loaded (``Module <name> <hash> load on device ...``), by today's names."""
    text = gzip.decompress(H200_LOG.read_bytes()).decode()
    return {f"wp_{RENAMED.get(name, name)}_{digest}"
            for name, digest in re.findall(r"^Module (\S+) ([0-9a-f]{7}) load on device", text, re.M)}


@pytest.fixture(scope="module")
def planned(applied_session: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[int, tuple[dict, Path]]:
    """The child's record at 256 worlds (compiling the backend's own module only) and at 4096 (compiling the env
    step's timestamp kernel only)."""
    tree, overlay = applied_session
    out = {}
    for worlds, only in ((256, "flashsac_runtime.mjwarp."), (4096, STAMPS)):
        dest = tmp_path_factory.mktemp(f"warp-kernels-{worlds}")
        out[worlds] = (warp_kernels.build(dest, tree, overlay, G1_ASSETS, worlds=(worlds,), archs=(90,), jobs=1,
                                          only=only), dest)
    return out


def test_the_plan_is_what_an_h200_loads(planned: dict[int, tuple[dict, Path]]) -> None:
    loaded = h200_modules()
    assert len(loaded) > 40 and SCRATCH_BROADPHASE in loaded
    plan = {entry["id"] for entry in planned[256][0]["modules"]}
    assert loaded - plan == {SCRATCH_BROADPHASE}
    other = {entry["id"] for entry in planned[4096][0]["modules"]}
    assert len(loaded - other) > 1  # the control: another world count, another size-keyed kernel


def test_a_module_compiled_ahead_lands_where_warp_looks(planned: dict[int, tuple[dict, Path]]) -> None:
    record, dest = planned[256]
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


def test_the_step_stamps_kernel_is_planned_once(planned: dict[int, tuple[dict, Path]]) -> None:
    """The env step's timestamp kernel (flashsac_runtime.envs, on by default) is built ahead too: one module, the same at
    every world count (it holds no count); compiled ahead it lands where Warp looks, as the physics' modules do."""
    ids = [[entry["id"] for entry in planned[worlds][0]["modules"] if entry["module"] == STAMPS]
           for worlds in (256, 4096)]
    assert len(ids[0]) == 1 and ids[0] == ids[1], ids
    record, dest = planned[4096]
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


def test_a_tree_without_the_series_is_refused(tmp_path: Path) -> None:
    (tmp_path / "unilab").mkdir()
    with pytest.raises(OfflineError, match=r"MuJoCo Warp's kernels are built from the applied tree.*make apply wheelhouse"):
        _applied_tree(WarpKernels(tree=tmp_path / "unilab"))
