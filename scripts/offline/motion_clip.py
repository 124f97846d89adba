#!/usr/bin/env python3
"""A SYNTHETIC motion clip for UniLab 1.3.2's G1 motion tracking task, for a host that cannot reach Hugging Face.

UniLab's G1 motion tracking task (`conf/flashsac/task/g1_motion_tracking/base.yaml`) tracks the clip its
`motion_file` names (`motions/g1/dance1_subject2_part.npz`, under `src/unilab/assets/`), which UniLab's loader
(`unilab.tasks.motion_tracking.common.motion_loader.MotionLoader`, through `unilab.assets.hub.resolve_motion_files`)
downloads from Hugging Face when the file is absent. This writes a clip in exactly the format that loader reads into
that place, so that the loader finds it and downloads nothing. The clip is **synthetic, not a recorded motion**:

- the G1 (`robots/g1/scene_flat.xml`) from its `stand` keyframe, each of its 29 hinge joints swinging on a sine
  about that pose (a walking-like gait for the legs, left and right half a period apart, the waist and arms
  slower), every angle kept inside the joint's range by a margin;
- the root walking forward at 0.3 m/s with a small sideways sway, yaw, roll and pitch, its height set in every
  frame so that the lower foot stands where the `stand` pose puts it;
- every body's world position and orientation from MuJoCo's forward kinematics of that trajectory, and the
  body velocities from MuJoCo (`mj_objectVelocity` at each body's origin, world orientation) for joint and root
  velocities differentiated on the clip (`mj_differentiatePos`, central differences).

The file holds the arrays the loader reads (`fps`; `joint_pos`, `joint_vel` (frames, 29); `body_pos_w`,
`body_quat_w` (w, x, y, z), `body_lin_vel_w`, `body_ang_vel_w` (frames, bodies, 3 or 4) on MuJoCo's body ids, the
world body first, as UniLab's exported clips keep them) and one more, `synthetic`, that says what it is (the loader
does not read it; `is_synthetic` does). A policy trained on it learns to track this motion, not the dance: use it
for tests and throughput measurements, never as a result about motion tracking.

A clip already at the place, real or synthetic, is never overwritten: the real clip's path is used when present.

    python scripts/offline/motion_clip.py --tree work/unilab-1.3.2   # the tree's motions/g1/<clip>.npz
    python scripts/offline/motion_clip.py --scene <scene.xml> --output <file.npz>

Bad input is one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

PROG = "motion_clip"
#: Relative to the tree's root.
ASSETS_REL = Path("src/unilab/assets")
TASK_BASE_REL = Path("src/unilab/conf/flashsac/task/g1_motion_tracking/base.yaml")
SCENE_REL = ASSETS_REL / "robots/g1/scene_flat.xml"
#: The clip the task names, relative to the assets folder, when its config cannot be read.
DEFAULT_CLIP = "motions/g1/dance1_subject2_part.npz"
SYNTHETIC_NOTE = ("synthetic G1 motion clip (scripts/offline/motion_clip.py): sine joint trajectories about the stand "
                  "keyframe inside the joint limits, the root walking forward at 0.3 m/s; not a recorded motion")
FOOT_BODIES = ("left_ankle_roll_link", "right_ankle_roll_link")


class ClipError(RuntimeError):
    """Bad input or a place the clip cannot be written to; the message is the one line to print."""


def task_clip(tree: Path) -> Path:
    """Where UniLab looks for the task's clip in ``tree``: its assets folder joined with the config's motion_file."""
    base = tree / TASK_BASE_REL
    if not base.is_file():
        raise ClipError(f"{base} is missing: {tree} is not a UniLab 1.3.2 tree with the G1 motion tracking task")
    import yaml

    config = yaml.safe_load(base.read_text(encoding="utf-8"))
    try:
        motion_file = config["env"]["commands"]["motion"]["params"]["motion_file"]
    except (KeyError, TypeError):
        motion_file = DEFAULT_CLIP
    if not isinstance(motion_file, str) or Path(motion_file).is_absolute():
        raise ClipError(f"{base}: motion_file {motion_file!r} is not one path relative to the assets folder")
    return tree / ASSETS_REL / motion_file


def is_synthetic(path: Path) -> bool:
    """Whether the clip at ``path`` is one this script wrote."""
    with np.load(path) as data:
        return "synthetic" in data.files


def _hinge_joints(model: Any, mujoco: Any) -> list[int]:
    joints = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_HINGE]
    free = [j for j in range(model.njnt) if model.jnt_type[j] == mujoco.mjtJoint.mjJNT_FREE]
    if len(free) != 1 or model.jnt_qposadr[free[0]] != 0 or not joints:
        raise ClipError("the scene is not a floating-base robot with hinge joints (the G1's layout)")
    return joints


def _yaw_pitch_roll_quat(yaw: np.ndarray, pitch: np.ndarray, roll: np.ndarray) -> np.ndarray:
    """(w, x, y, z) of the rotation yaw about z, then pitch about y, then roll about x (intrinsic)."""
    cy, sy, cp, sp, cr, sr = (f(a / 2) for a in (yaw, pitch, roll) for f in (np.cos, np.sin))
    return np.stack([cr * cp * cy + sr * sp * sy, sr * cp * cy - cr * sp * sy,
                     cr * sp * cy + sr * cp * sy, cr * cp * sy - sr * sp * cy], axis=-1)


def synthesize(scene: Path, *, seconds: float = 10.0, fps: int = 50) -> dict[str, np.ndarray]:
    """The clip's arrays for the robot of ``scene`` (a MuJoCo scene with the G1's meshes in place)."""
    import mujoco

    if fps <= 0 or seconds <= 0:
        raise ClipError(f"fps and seconds must be positive, got fps={fps}, seconds={seconds}")
    try:
        model = mujoco.MjModel.from_xml_path(str(scene))
    except (ValueError, OSError) as exc:
        raise ClipError(f"cannot load {scene}: {' '.join(str(exc).split())[:300]}") from exc
    data = mujoco.MjData(model)
    joints = _hinge_joints(model, mujoco)
    key = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_KEY, "stand")
    stand = model.key_qpos[key].copy() if key >= 0 else model.qpos0.copy()
    lo, hi = model.jnt_range[joints, 0], model.jnt_range[joints, 1]
    adr = model.jnt_qposadr[joints]
    q0 = np.clip(stand[adr], lo, hi)
    margin = 0.05 * (hi - lo)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j) for j in joints]

    frames = int(round(seconds * fps)) + 1
    t = np.arange(frames) / fps
    # Each joint: amplitude half its room about the stand pose inside the margins, at most 0.35 rad; legs at the
    # gait's 1 Hz, the right leg half a period behind the left; the waist and arms at 0.5 Hz.
    room = np.minimum(q0 - (lo + margin), (hi - margin) - q0).clip(min=0.0)
    amplitude = np.minimum(0.5 * room, 0.35)
    leg = np.array([("hip" in n or "knee" in n or "ankle" in n) for n in names])
    freq = np.where(leg, 1.0, 0.5)
    phase = np.array([np.pi if n.startswith("right") else 0.0 for n in names]) + 0.3 * np.arange(len(names))
    joint_pos = q0 + amplitude * np.sin(2 * np.pi * freq * t[:, None] + phase)
    joint_pos = np.clip(joint_pos, lo + margin, hi - margin)

    yaw = 0.2 * np.sin(2 * np.pi * 0.1 * t)
    root_quat = _yaw_pitch_roll_quat(yaw, 0.03 * np.sin(2 * np.pi * 1.0 * t), 0.03 * np.sin(2 * np.pi * 0.5 * t))
    root_pos = np.stack([0.3 * t, 0.05 * np.sin(2 * np.pi * 0.5 * t), np.full(frames, stand[2])], axis=-1)

    feet = [mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in FOOT_BODIES]
    if min(feet) < 0:
        raise ClipError(f"the scene has no bodies {', '.join(FOOT_BODIES)}: not the G1")
    qpos = np.tile(stand, (frames, 1))
    qpos[:, 0:3], qpos[:, 3:7], qpos[:, adr] = root_pos, root_quat, joint_pos
    data.qpos[:] = stand
    mujoco.mj_kinematics(model, data)
    stand_foot_z = data.xpos[feet, 2].min()
    for i in range(frames):  # the lower foot where the stand pose has it
        data.qpos[:] = qpos[i]
        mujoco.mj_kinematics(model, data)
        qpos[i, 2] += stand_foot_z - data.xpos[feet, 2].min()

    qvel = np.zeros((frames, model.nv))
    step = np.zeros(model.nv)
    for i in range(frames):
        a, b = max(i - 1, 0), min(i + 1, frames - 1)
        mujoco.mj_differentiatePos(model, step, (b - a) / fps, qpos[a], qpos[b])
        qvel[i] = step
    nbody = model.nbody
    out = {k: np.zeros((frames, nbody, n)) for k, n in
           (("body_pos_w", 3), ("body_quat_w", 4), ("body_lin_vel_w", 3), ("body_ang_vel_w", 3))}
    velocity = np.zeros(6)
    for i in range(frames):
        data.qpos[:], data.qvel[:] = qpos[i], qvel[i]
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        mujoco.mj_comVel(model, data)
        out["body_pos_w"][i] = data.xpos
        out["body_quat_w"][i] = data.xquat
        for body in range(nbody):
            mujoco.mj_objectVelocity(model, data, mujoco.mjtObj.mjOBJ_BODY, body, velocity, 0)
            out["body_ang_vel_w"][i, body], out["body_lin_vel_w"][i, body] = velocity[:3], velocity[3:]
    dof = model.jnt_dofadr[joints]
    return {"fps": np.array([fps], dtype=np.int64),
            "joint_pos": qpos[:, adr].astype(np.float32), "joint_vel": qvel[:, dof].astype(np.float32),
            **{k: v.astype(np.float32) for k, v in out.items()},
            "synthetic": np.array(SYNTHETIC_NOTE)}


def write_clip(path: Path, scene: Path, *, seconds: float = 10.0, fps: int = 50) -> str:
    """The synthetic clip at ``path`` unless a clip is there already; returns the line to print."""
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ClipError(f"{path} is there and is not a plain file: no clip written")
    if path.is_file():
        kind = "a synthetic clip" if is_synthetic(path) else "a clip that is not synthetic (UniLab's own)"
        return f"{path}: {kind} is there already, left as it is"
    if not path.parent.is_dir():
        raise ClipError(f"{path.parent} is not a folder: no clip written (is the tree a UniLab 1.3.2 tree?)")
    arrays = synthesize(scene, seconds=seconds, fps=fps)
    partial = path.with_name(f".{path.name}.writing-{os.getpid()}.npz")
    try:
        np.savez(partial, **arrays)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise ClipError(f"cannot write {path} ({exc.strerror or exc})") from exc
    frames, bodies = arrays["body_pos_w"].shape[:2]
    return (f"{path}: synthetic G1 motion clip written ({frames} frames at {fps} fps, "
            f"{arrays['joint_pos'].shape[1]} joints, {bodies} bodies); not a recorded motion")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--tree", type=Path, help="a UniLab 1.3.2 tree: the clip goes where its task looks for it")
    where.add_argument("--output", type=Path, help="write the clip here instead (needs --scene)")
    parser.add_argument("--scene", type=Path, help="the G1 scene (default: the tree's robots/g1/scene_flat.xml)")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--fps", type=int, default=50)
    args = parser.parse_args(argv)
    try:
        if args.tree is not None:
            path, scene = task_clip(args.tree), args.scene or args.tree / SCENE_REL
        elif args.scene is None:
            raise ClipError("--output needs --scene (the G1 scene whose kinematics the clip follows)")
        else:
            path, scene = args.output, args.scene
        print(write_clip(path, scene, seconds=args.seconds, fps=args.fps))
    except ClipError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
