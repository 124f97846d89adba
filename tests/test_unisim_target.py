"""The third pinned target: unisim from the sha256-pinned unisim-core 1.7.8 sdist, patched into overlay/unisim.

Real artifacts and the real applier, as users run it: the round trip is byte-exact including overlay/unisim, the
overlay's unisim is what imports (provenance says so and checks it against the manifest's post-image), and the
negative controls show each check failing: a unisim from site-packages, an edited overlay file, a tampered unisim
patch, a wrong sdist.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROJECT, Runner, tree_hashes

BACKEND = "unisim/backend/mujoco/backend.py"


def manifest_entry(rel: str) -> dict[str, str]:
    return json.loads((PROJECT / "patches" / "MANIFEST.json").read_text())["targets"]["unisim"][rel]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def import_record(overlay: Path, checkout: Path, tmp: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """Import the patched unisim module with the overlay first on PYTHONPATH; return the process and its record."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(checkout / "src")]),
           "FLASHSAC_PROVENANCE_DIR": str(tmp), "FLASHSAC_UNILAB_ROOT": str(checkout)}
    proc = subprocess.run([sys.executable, "-c", "import os, unisim.backend.mujoco.backend; print(os.getpid())"],
                          env=env, cwd=checkout, capture_output=True, text=True, check=True)
    record = json.loads((tmp / f"provenance-{proc.stdout.split()[-1]}.json").read_text())
    return proc, record


def test_round_trip_includes_overlay_unisim(checkout: Path, overlay: Path, run_patchset: Runner) -> None:
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    want = manifest_entry(BACKEND)
    assert sha256(overlay / BACKEND) == want["post"] != want["pre"]
    import unisim  # the installed unisim-core 1.7.8 is the pristine pre-image the sdist pins
    assert sha256(Path(unisim.__file__).parent / "backend/mujoco/backend.py") == want["pre"]
    status = run_patchset("status", "--unilab", str(checkout))
    assert f"unisim:{BACKEND}" in status.stdout and "unisim/0001-" in status.stdout
    assert all(line.split()[-1] == "applied" for line in status.stdout.splitlines() if "unisim" in line)
    assert run_patchset("revert", "--unilab", str(checkout)).returncode == 0
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before
    assert not (overlay / "unisim").exists()


def test_provenance_from_overlay_unisim_and_its_controls(checkout: Path, overlay: Path, run_patchset: Runner,
                                                         tmp_path: Path) -> None:
    assert run_patchset("apply", "--unilab", str(checkout)).returncode == 0
    proc = run_patchset("provenance", "--unilab", str(checkout), "--json")
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["package_origins"] == {"uni_rl": "overlay", "unisim": "overlay", "flashsac_runtime": "overlay"}
    assert not record["flagged"]
    backend = next(m for m in record["modules"] if m["name"] == "unisim.backend.mujoco.backend")
    assert backend["origin"] == "overlay" and backend["expected_sha256"] == manifest_entry(BACKEND)["post"]
    assert backend["matches"] is True

    # control 1: the overlay's unisim edited after apply: imported, hashed, flagged; patchset provenance fails
    target = overlay / BACKEND
    target.write_bytes(target.read_bytes() + b"# edited\n")
    proc, rec = import_record(overlay, checkout, tmp_path / "edited")
    assert rec["flagged"] and "unisim.backend.mujoco.backend" in " ".join(rec["warnings"])
    assert "differ from the applied series" in proc.stderr
    assert "differ from the applied series" in one_line_error(run_patchset("provenance", "--unilab", str(checkout)))
    target.write_bytes(target.read_bytes()[: -len(b"# edited\n")])

    # control 2: the overlay's unisim moved away: the installed site-packages unisim imports and is flagged
    (overlay / "unisim").rename(tmp_path / "unisim-away")
    proc, rec = import_record(overlay, checkout, tmp_path / "site")
    assert rec["package_origins"]["unisim"] == "site-packages" and rec["flagged"]
    assert "unisim was imported from" in proc.stderr and "NOT from the overlay" in proc.stderr
    line = one_line_error(run_patchset("provenance", "--unilab", str(checkout)))
    assert "unisim was imported from" in line
    (tmp_path / "unisim-away").rename(overlay / "unisim")
    assert run_patchset("provenance", "--unilab", str(checkout)).returncode == 0


def test_tampered_unisim_patch_refused(checkout: Path, overlay: Path, run_patchset: Runner, tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    subprocess.run(["cp", "-r", str(PROJECT / "patches"), str(patches)], check=True)
    (patch,) = (patches / "unisim").glob("0001-*.patch")
    patch.write_text(patch.read_text().replace("recompute != mjbatch.RecomputeLevel.NONE",
                                               "recompute > mjbatch.RecomputeLevel.SET_CONST"))
    before, overlay_before = tree_hashes(checkout), tree_hashes(overlay)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout), "--patches", str(patches)))
    assert "was modified" in line and patch.name in line
    assert tree_hashes(checkout) == before and tree_hashes(overlay) == overlay_before


def test_wrong_unisim_sdist_refused(checkout: Path, overlay: Path, run_patchset: Runner, sdist: Path) -> None:
    """The verified-artifact chain: a given file is trusted by sha256 only (here: the unilab sdist posing as it)."""
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout), "--unisim-sdist", str(sdist)))
    assert "pinned" in line and "unisim_core-1.7.8.tar.gz" in line
    assert tree_hashes(checkout) == before and not (overlay / "unisim").exists()


@pytest.mark.parametrize("package", ["uni_rl", "unisim"])
def test_someone_elses_package_in_the_overlay_is_kept(checkout: Path, overlay: Path, run_patchset: Runner,
                                                      package: str) -> None:
    mine = overlay / package / "mine.py"
    mine.parent.mkdir()
    mine.write_text("my own work\n")
    before = tree_hashes(checkout)
    line = one_line_error(run_patchset("apply", "--unilab", str(checkout)))
    assert f"{overlay / package} exists and was not built by patchset" in line
    assert mine.read_text() == "my own work\n" and tree_hashes(checkout) == before
