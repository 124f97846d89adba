"""The README's training commands, pasted as a user would, train G1 Walk Flat on the applied tree (CPU).

The commands are read from README.md's "Train" section, not written again here: a README whose command no longer
trains fails this test. Each runs from the root of a copy of the applied tree laid out as `make apply` lays out
the project (`<project>/work/unilab-1.3.2`, `<project>/overlay`, `<project>/.venv`), with a few overrides that
make it short (16 envs, 3 iterations) and headless. MuJoCo Warp's command trains on Warp's CPU device (unisim 0002's
opt-in) with the device-resident collector on the CPU; CPU MuJoCo's host collector needs a CUDA or MPS learner
(UniLab's own requirement), so here its command must get as far as that check with the overlay imported. Negative
control: the MuJoCo Warp command with the overlay left off `PYTHONPATH` fails the check the README's passes.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import PROJECT, runnable_tree

#: Short and headless: the task's physics, model and terms as the command gives them.
SHORT = ("algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8", "algo.learning_starts=2",
         "algo.max_iterations=3", "algo.save_interval=0", "training.no_play=true", "training.export_onnx=false",
         "training.logger=no_print")


def readme_commands() -> dict[str, str]:
    """task -> the README's command line for it, from the Train section's code block."""
    text = (PROJECT / "README.md").read_text()
    section = text.split("\n## Train\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md's Train section has no bash block"
    lines = block.group(1).splitlines()
    assert lines[0] == "cd work/unilab-1.3.2", lines[0]
    commands = {}
    for line in lines[1:]:
        task = re.search(r"task=(\S+)", line)
        if task and not line.startswith("#"):
            commands[task.group(1)] = line
    return commands


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> Path:
    """A project folder as `make apply` leaves it: the applied tree (with the G1 meshes), its overlay, the venv."""
    checkout, overlay = applied_session
    root = tmp_path_factory.mktemp("readme") / "project"
    runnable_tree(checkout, root / "work" / "unilab-1.3.2")
    (root / "overlay").symlink_to(overlay)
    (root / ".venv").symlink_to(PROJECT / ".venv")
    return root


def paste(project: Path, command: str, run: Path, **env: str) -> subprocess.CompletedProcess:
    """Run one README command line from the tree's root, as a shell would, with the short overrides; the run's
    log folder is run/log and every process's provenance record goes to run/provenance."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    clean.update(CUDA_VISIBLE_DEVICES="", MUJOCO_GL="disable", FLASHSAC_PROVENANCE_DIR=str(run / "provenance"), **env)
    line = f"{command} {' '.join(SHORT)} training.log_dir='{run / 'log'}'"
    return subprocess.run(["bash", "-c", line], cwd=project / "work" / "unilab-1.3.2", env=clean,
                          capture_output=True, text=True, timeout=900, check=False)


def check_trained(proc: subprocess.CompletedProcess, run: Path) -> None:
    """The run completed its iterations with the overlay's uni_rl and unisim, as their files were applied."""
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((run / "log" / "run_summary.json").read_text())
    assert summary["status"] == "completed" and summary["completed_iterations"] == 3, summary
    records = [json.loads(p.read_text()) for p in (run / "provenance").glob("provenance-*.json")]
    trainer = [r for r in records if r["uni_rl_origin"] is not None]
    assert trainer, f"no process of the run imported uni_rl with the overlay's provenance hook: {records}"
    assert all(r["uni_rl_origin"] == "overlay" and not r["flagged"] for r in trainer), \
        [r["warnings"] for r in trainer]


def test_the_readme_names_both_physics() -> None:
    assert sorted(readme_commands()) == ["g1_walk_flat/mjwarp", "g1_walk_flat/mujoco"]


def test_the_readme_mjwarp_command_trains(project: Path, tmp_path: Path) -> None:
    proc = paste(project, readme_commands()["g1_walk_flat/mjwarp"], tmp_path, UNISIM_MJWARP_ALLOW_CPU="1")
    check_trained(proc, tmp_path)


def test_the_readme_mujoco_command_reaches_the_learner_device(project: Path, tmp_path: Path) -> None:
    """UniLab 1.3.2's host collector needs a CUDA or MPS learner: on this CPU the command composes its config,
    imports the overlay and stops there with UniLab's own one-line reason (a GPU host trains: results/)."""
    proc = paste(project, readme_commands()["g1_walk_flat/mujoco"], tmp_path)
    assert proc.returncode != 0
    assert "requires a CUDA or MPS learner device" in proc.stderr.strip().splitlines()[-3], proc.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in (tmp_path / "provenance").glob("provenance-*.json")]
    assert [r["uni_rl_origin"] for r in records if r["uni_rl_origin"]] == ["overlay"], records


def test_without_the_overlay_the_check_fails(project: Path, tmp_path: Path) -> None:
    """Negative control: the same command with the overlay left off PYTHONPATH does not pass the check."""
    command = readme_commands()["g1_walk_flat/mjwarp"]
    assert "$PWD/../../overlay:" in command
    proc = paste(project, command.replace("$PWD/../../overlay:", ""), tmp_path, UNISIM_MJWARP_ALLOW_CPU="1")
    with pytest.raises(AssertionError):
        check_trained(proc, tmp_path)
