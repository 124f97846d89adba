"""The learner's compile artifacts, built once on a GPU host and carried to hosts that have never compiled it.

Why: on a fresh machine the learner's compiled paths come from Inductor and Triton compiles that start at
launch. With compile behind (the default on one CUDA device) training starts on the eager learner while a helper
process compiles; on a fresh H100 at UniLab's G1 defaults that helper took 43 s with 16 workers, and the eager
learner ran about three times slower until the swap (results/2026-12-06-h100-headline). The learner's warm-up
already loads PyTorch's portable cache artifacts (``torch.compiler.load_cache_artifacts``) from its compile cache
folder and saves them after a warm-up that loaded nothing (uni_rl 0008); those files stay on the machine that made
them. Here they are built by real trainings on a GPU host (`make compile-artifacts`), recorded with what they are
valid for, carried in the wheelhouse (`make wheelhouse COMPILE_ARTIFACTS=...`) and put into the learner's compile
cache folder by `make setup OFFLINE=`.

Validity: the warm-up names each file by torch's version, the GPU's name and the warm-up's shapes and switches
(``compile_cache_file``); each cached kernel or graph is still checked by torch's own cache keys when it is used.
The record names torch, Triton, CUDA, the GPU and its architecture; a host whose torch or GPU differs is told so in
one line and does not get the files (its learner then compiles behind, as without them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from patchset.api import file_sha256

from . import OfflineError

FOLDER = "compile-artifacts"
RECORD = "compile-artifacts.json"
#: The environment variable the learner's warm-up reads its compile cache folder from (uni_rl 0008).
CACHE_DIR_ENV = "FLASHSAC_COMPILE_CACHE_DIR"
#: The settings whose learner is compiled, as Hydra overrides: UniLab's own G1 defaults and the report's at 2/1/1
#: (docs/benchmark.md; the bench's table of settings holds the same values, which a test compares).
SETTINGS: dict[str, tuple[str, ...]] = {
    "unilab-default": (),
    "report": ("algo.num_envs=256", "algo.batch_size=256", "algo.replay_buffer_n=32", "algo.learning_starts=8",
               "algo.policy_frequency=2", "algo.updates_per_step=2"),
}
#: What the trainings run by default: the README's GPU command (MuJoCo Warp, the device collector), one iteration,
#: every compile before it (so the warm-up compiles everything and saves the artifacts). A host that trains on CPU
#: MuJoCo builds them with ``g1_walk_flat/mujoco`` (``--task``; the host collector's learner warms up on its own
#: layouts, which the warm-up's file names hold).
TASK = "task=g1_walk_flat/mjwarp"
RUN = ("algo.max_iterations=1", "training.compile_behind=false", "training.no_play=true",
       "training.export_onnx=false", "training.logger=no_print")
#: Printed by the child: torch's facts for the record.
FACTS = r"""
import json, torch, triton
props = torch.cuda.get_device_properties(0)
print(json.dumps({"torch": torch.__version__, "triton": triton.__version__, "cuda": torch.version.cuda,
                  "gpu": torch.cuda.get_device_name(0), "arch": f"sm_{props.major}{props.minor}"}))
"""


def host_facts(python: Sequence[str], env: Mapping[str, str]) -> dict[str, str] | None:
    """torch, Triton, CUDA, the GPU's name and architecture as this host's interpreter sees them; None without a
    CUDA device."""
    proc = subprocess.run([*python, "-c", "import torch; print(torch.cuda.is_available())"], env=dict(env),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0 or proc.stdout.strip() != "True":
        return None
    proc = subprocess.run([*python, "-c", FACTS], env=dict(env), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OfflineError(f"cannot read torch's facts on this host: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build(dest: Path, tree: Path, overlay: Path, python: Sequence[str], env: Mapping[str, str],
          settings: Sequence[str] = tuple(SETTINGS), task: str = TASK, collector: str | None = None) -> dict[str, Any]:
    """Run one training iteration per setting in the applied ``tree`` (compiling before it) with the compile cache
    folder at ``dest``, and write the record; returns it. Needs a CUDA device (one line otherwise).

    ``collector``: who steps the env (``training.collector``), where it is not the owner's default: the learner
    warms up on the layouts of its collector, so a task owner trained with either builds the artifacts of each."""
    facts = host_facts(python, env)
    if facts is None:
        raise OfflineError("the compile artifacts are built on a GPU host: this host has no CUDA device for torch")
    unknown = [s for s in settings if s not in SETTINGS]
    if unknown:
        raise OfflineError(f"unknown setting {unknown[0]!r}: expected {', '.join(SETTINGS)}")
    if dest.exists() and any(dest.iterdir()):
        raise OfflineError(f"{dest} is not empty: the artifacts are built into an empty folder")
    dest.mkdir(parents=True, exist_ok=True)
    run_env = {**env, CACHE_DIR_ENV: str(dest.resolve()),
               "PYTHONPATH": os.pathsep.join([str(overlay), str(tree / "src"), env.get("PYTHONPATH", "")]).rstrip(
                   os.pathsep)}
    for setting in settings:
        print(f"[compile-artifacts] {setting}: one iteration of {task}, every compile before it", flush=True)
        chosen = (f"training.collector={collector}",) if collector else ()
        proc = subprocess.run([*python, "src/unilab/scripts/train_flashsac.py", task, *SETTINGS[setting], *chosen, *RUN],
                              cwd=tree, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              check=False)
        if proc.returncode != 0:
            last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
            raise OfflineError(f"the {setting} training for the compile artifacts failed (exit {proc.returncode}): "
                               f"{last}")
    files = {p.name: file_sha256(p) for p in sorted(dest.glob("artifacts-*.bin"))}
    if len(files) < len(settings):
        raise OfflineError(f"the trainings saved {len(files)} artifact file(s) for {len(settings)} setting(s): "
                           f"was {dest} used by the warm-up?")
    record = {**facts, "settings": list(settings), "task": task, "collector": collector or "the owner's default",
              "files": files}
    (dest / RECORD).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record


def load(folder: Path) -> dict[str, Any]:
    """The record of an artifacts folder, every file's sha256 checked (one line for a missing or altered one)."""
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OfflineError(f"{folder / RECORD} is missing or unreadable ({exc}): build it with "
                           "`make compile-artifacts` on a GPU host") from None
    for name, sha in record.get("files", {}).items():
        if not (folder / name).is_file() or file_sha256(folder / name) != sha:
            raise OfflineError(f"{folder / name} is missing or differs from its record: build the artifacts again")
    return record


def cache_dir(env: Mapping[str, str]) -> Path | None:
    """The folder the learner's warm-up loads artifacts from, as it resolves it (None: the cache is off)."""
    configured = env.get(CACHE_DIR_ENV)
    if configured == "":
        return None
    if configured:
        return Path(configured)
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "flashsac-overlay" / "compile"


def seed(folder: Path, record: Mapping[str, Any], facts: Mapping[str, str] | None,
         env: Mapping[str, str]) -> str:
    """Put the artifacts into this host's compile cache folder when its torch and GPU are those they were built
    with (never overwriting a file there); the line to print."""
    built = f"torch {record['torch']} on {record['gpu']}"
    if facts is None:
        return f"compile artifacts ({built}): not used, this host has no CUDA device for torch"
    if (facts["torch"], facts["gpu"]) != (record["torch"], record["gpu"]):
        return (f"compile artifacts ({built}): not used, this host runs torch {facts['torch']} on {facts['gpu']}; "
                "the learner compiles behind")
    dest = cache_dir(env)
    if dest is None:
        return f"compile artifacts ({built}): not used, {CACHE_DIR_ENV} is empty (the compile cache is off)"
    dest.mkdir(parents=True, exist_ok=True)
    copied = 0
    for name in record["files"]:
        if not (dest / name).exists():
            partial = dest / f".{name}.{os.getpid()}.partial"
            shutil.copyfile(folder / name, partial)
            os.replace(partial, dest / name)
            copied += 1
    return (f"compile artifacts ({built}, {', '.join(record['settings'])}): {copied} put into {dest}, "
            f"{len(record['files']) - copied} already there")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m offline.compile_artifacts DEST``: build into DEST from the applier's embedded tree."""
    import argparse

    from patchset.api import OVERLAY_DIR, embedded_tree

    parser = argparse.ArgumentParser(prog="offline.compile_artifacts", description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--unilab-tree", type=Path, help="the applied UniLab tree (default: the embedded tree)")
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), help="default: %(default)s")
    parser.add_argument("--task", default=TASK.removeprefix("task="), help="the task owner (default: %(default)s)")
    parser.add_argument("--collector", choices=("host", "device"),
                        help="training.collector for the trainings (default: the owner's own)")
    args = parser.parse_args(argv)
    try:
        record = build(args.dest.resolve(), (args.unilab_tree or embedded_tree()).resolve(), OVERLAY_DIR.resolve(),
                       [sys.executable], os.environ, args.settings, f"task={args.task}", args.collector)
    except OfflineError as exc:
        print(f"compile-artifacts: error: {exc}", file=sys.stderr)
        return 1
    print(f"compile artifacts {args.dest}: {len(record['files'])} file(s) for torch {record['torch']} on "
          f"{record['gpu']} ({record['arch']}), settings {', '.join(record['settings'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
