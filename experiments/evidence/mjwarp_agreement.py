#!/usr/bin/env python3
"""One-step agreement of MuJoCo Warp with CPU MuJoCo on identical states and controls, G1 Walk Flat or Go2 Joystick Flat.

MJWarp is another implementation of the same MJCF physics (float32, its own contact and solver kernels), so a
run on it is not bitwise equal to CPU MuJoCo; what must hold is that one control step from the same state with
the same actuator targets lands in the same place, within a tolerance small against the step's own motion.

``--task`` picks the task (``g1_walk_flat``, the default, or ``go2_joystick_flat``); its ``mujoco`` owner is the
reference and its ``mjwarp`` owner the candidate. States: a source env of the task on CPU MuJoCo (the collector's
env, Hydra config of the tree in the working directory) is driven by seeded random actions with autoreset; every
``--every`` steps the state before the step (qpos, qvel) and the actuator targets the step applied are recorded:
standing, falling, on the ground, just reset. Comparison: two fresh envs of the task, one per owner, built with
the same seed:

1. **Model**: the compiled ``MjModel`` of each backend, field by field, exactly. MuJoCo's backend compiles the
   scene without its visual-only geoms (contype = conaffinity = 0) and their meshes, materials and textures, and
   adds tracked-body sensors (`track_*`) for the root only, MuJoCo Warp's for every body; so the geoms compared are the
   colliding ones (in order, every ``geom_*`` field but ``geom_matid``, a material), the sensors those of the
   reference (by name, their objects by name), and every other field whole, but ``dof_length``, which MuJoCo
   derives from the extents of all geoms and reads only when sleeping is enabled (it is not in these models).
   The solver options are also read back from MuJoCo Warp's device model (its tolerance raised to 1e-6, MuJoCo
   Warp's floor for float32: the one option that differs, by MuJoCo Warp's design). Substeps must be equal.
2. **One step on the default model rows**: both backends, never reset through the env (the model's defaults),
   get the same recorded state in every env row (``set_state``) and the same targets, and take one control step
   (the task's substeps); their qpos and qvel are compared (``relative_error``), and the task's foot contact
   sensors after the step (``contacts``).
3. **Reset**: both envs' ``init_state`` (the task's reset events with the same seed: root pose and velocity,
   the gains, and each owner's mass, centre-of-mass and gravity randomization) must give the same qpos and qvel
   and, row by row, the same randomized model fields (MuJoCo's per-env batch fields against MuJoCo Warp's
   per-world device arrays, equal to float32 rounding).
4. **One step on the reset rows**: step 2 again, now with every row's randomized model
   (``relative_error_after_reset``, ``contacts_after_reset``).

Metric per env row: the error of MJWarp's next qpos/qvel against MuJoCo's, divided by the size of MuJoCo's own
one-step change of that quantity (max-norm over its components; a floor keeps a resting robot from dividing by
~0). The check passes when the ``--quantile`` (default 0.99) of that relative error stays under
``--tolerance`` (default 1e-3) for both quantities: MJWarp may differ from MuJoCo by at most 0.1 % of what one
step does, in all but the rarest rows (measured on Warp's CPU device: ~4e-5). Foot contacts: each foot contact
sensor's found flag after the step, row by row; the share of (row, sensor) pairs that differ must stay under
``1 - --quantile`` (a contact at the threshold may flip between float32 and float64). Negative controls:
``--perturb-ctrl X`` adds X to one actuator target of every env on the MJWarp side only (a physically small
change: X = 0.01 rad must fail), ``--candidate-override KEY=VALUE`` (repeatable) gives the MJWarp side's config
a Hydra override (a changed gain range must fail), and ``--mujoco-both`` compares MuJoCo with itself (must give
exactly zero).

Run from a UniLab tree root with the overlay and the tree on PYTHONPATH. On a CPU-only machine the MJWarp side
runs on Warp's CPU device (``UNISIM_MJWARP_ALLOW_CPU=1``, unisim 0002); on a GPU host on CUDA.

Run by ``tests/test_mjwarp_agreement.py`` on Warp's CPU device, and on a GPU host for the committed evidence.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "profile"))
from collector_profile import build_env  # noqa: E402  (the collector's env, built as the FlashSAC collector builds it)

#: Each task's foot contact sensors (``data="found"``: 1 while the foot touches the floor), read after a step.
FOOT_CONTACTS = {
    "g1_walk_flat": tuple(f"{side}_foot_contact_{i}" for side in ("left", "right") for i in range(4)),
    "go2_joystick_flat": ("FL_foot_contact", "FR_foot_contact", "RL_foot_contact", "RR_foot_contact"),
}
#: Model fields each owner's reset randomization may write per env row (those present in both backends are compared).
RESET_FIELDS = ("body_mass", "body_ipos", "body_iquat", "body_inertia", "dof_armature", "dof_damping",
                "dof_frictionloss", "geom_friction", "actuator_gainprm", "actuator_biasprm", "gravity")
#: Model fields left out of the whole-field comparison (see the module docstring, item 1).
MODEL_FIELD_PREFIXES_APART = ("geom_", "mesh_", "mat_", "tex_", "sensor_", "name_", "names", "bvh_", "paths")
MODEL_FIELDS_APART = ("body_geomadr", "body_geomnum", "body_bvhadr", "body_bvhnum", "dof_length")

#: MuJoCo Warp raises the solver's tolerance to this floor for float32 (``mujoco_warp.put_model``): the one
#: solver option that differs from the compiled model, by MuJoCo Warp's design (1e-8 in both tasks' models).
DEVICE_TOLERANCE_FLOOR = 1e-6
#: Sensors the backends add themselves (tracked-body frames: MuJoCo's for the root, MuJoCo Warp's for every
#: body), not the scene's: left out of the sensor comparison.
ADDED_SENSOR_PREFIX = "track_"

#: Smallest one-step change counted as motion (m or rad for qpos, per second for qvel): below it a row's
#: relative error is measured against this floor instead.
MOTION_FLOOR = {"qpos": 1e-4, "qvel": 1e-2}


@dataclass(frozen=True)
class Args:
    """The study's knobs (command line: the same names with dashes)."""

    task: str = "g1_walk_flat"
    num_envs: int = 64
    source_steps: int = 120
    every: int = 10
    seed: int = 1
    action_seed: int = 7
    tolerance: float = 1e-3
    quantile: float = 0.99
    perturb_ctrl: float = 0.0
    mujoco_both: bool = False
    candidate_override: tuple[str, ...] = ()


def sample_states(args: Args) -> dict[str, np.ndarray]:
    """(qpos, qvel) before a step and the actuator targets of that step, every ``args.every`` source steps."""
    env = build_env(args.num_envs, args.seed, f"{args.task}/mujoco")
    env.init_state()
    backend = env._backend  # noqa: SLF001 - the physics truth the env steps
    rng = np.random.default_rng(args.action_seed)
    dim = int(env.action_manager.total_action_dim)
    qpos, qvel, ctrl = [], [], []
    for step in range(args.source_steps):
        before = backend.get_state(("qpos", "qvel"))
        env.step(rng.uniform(-1.0, 1.0, size=(args.num_envs, dim)).astype(np.float32))
        if step % args.every == 0:
            qpos.append(before["qpos"])
            qvel.append(before["qvel"])
            ctrl.append(backend.get_state("ctrl")["ctrl"])
    env.close()
    return {"qpos": np.stack(qpos), "qvel": np.stack(qvel), "ctrl": np.stack(ctrl).astype(np.float32)}


def step_from(backend: Any, substeps: int, qpos: np.ndarray, qvel: np.ndarray, ctrl: np.ndarray,
              contacts: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Put every row in (qpos, qvel), apply ``ctrl`` for one control step, return the next qpos/qvel and contacts."""
    rows = np.arange(qpos.shape[0])
    backend.set_state(rows, qpos, qvel)
    backend.step(ctrl, nsteps=substeps)
    out = {k: np.asarray(v, dtype=np.float64) for k, v in backend.get_state(("qpos", "qvel")).items()}
    out["contacts"] = np.stack([np.asarray(backend.get_sensor_data(name)).reshape(qpos.shape[0], -1)[:, 0] > 0
                                for name in contacts], axis=-1) if contacts else np.zeros((qpos.shape[0], 0), bool)
    return out


def relative_errors(start: np.ndarray, reference: np.ndarray, candidate: np.ndarray, floor: float) -> np.ndarray:
    """Per row: max |candidate - reference| over max |reference - start| (floored)."""
    motion = np.maximum(np.abs(reference - start).max(axis=-1), floor)
    return np.abs(candidate - reference).max(axis=-1) / motion


def _named(model: Any, objtype: int, objid: int) -> str | int:
    """An object's name (its id where it has none, or where the id is -1)."""
    import mujoco

    if objid < 0 or objtype == int(mujoco.mjtObj.mjOBJ_UNKNOWN):
        return int(objid)
    return mujoco.mj_id2name(model, objtype, int(objid)) or int(objid)


def model_differences(reference: Any, candidate: Any) -> dict[str, Any]:
    """The compiled models' differences (module docstring, item 1); empty lists where they agree."""
    import mujoco

    whole, differ = 0, []
    for name in dir(reference):
        value = getattr(reference, name)
        if name.startswith("_") or not isinstance(value, np.ndarray):
            continue
        if name.startswith(MODEL_FIELD_PREFIXES_APART) or name in MODEL_FIELDS_APART:
            continue
        whole += 1
        other = getattr(candidate, name, None)
        if other is None or value.shape != other.shape or not np.array_equal(value, other, equal_nan=True):
            differ.append(name)
    options = []
    for name in dir(reference.opt):
        value = getattr(reference.opt, name)
        if name.startswith("_") or callable(value):
            continue
        if not np.array_equal(np.asarray(value), np.asarray(getattr(candidate.opt, name))):
            options.append(f"opt.{name}")

    def colliding(model: Any) -> np.ndarray:
        return np.flatnonzero((model.geom_contype != 0) | (model.geom_conaffinity != 0))

    ref_geoms, cand_geoms = colliding(reference), colliding(candidate)
    geom_fields = [n for n in dir(reference) if n.startswith("geom_") and n != "geom_matid"
                   and isinstance(getattr(reference, n), np.ndarray)]
    geoms: list[str] = []
    if ref_geoms.size != cand_geoms.size:
        geoms.append(f"{ref_geoms.size} colliding geoms against {cand_geoms.size}")
    else:
        geom = int(mujoco.mjtObj.mjOBJ_GEOM)
        if [_named(reference, geom, i) for i in ref_geoms] != [_named(candidate, geom, i) for i in cand_geoms]:
            geoms.append("colliding geom names")
        geoms += [n for n in geom_fields
                  if not np.array_equal(getattr(reference, n)[ref_geoms], getattr(candidate, n)[cand_geoms],
                                        equal_nan=True)]
    sensors: list[str] = []
    compared = 0
    sensor = int(mujoco.mjtObj.mjOBJ_SENSOR)
    plain = ("sensor_type", "sensor_datatype", "sensor_needstage", "sensor_objtype", "sensor_reftype",
             "sensor_dim", "sensor_cutoff", "sensor_noise", "sensor_intprm")
    for i in range(reference.nsensor):
        name = mujoco.mj_id2name(reference, sensor, i)
        if name.startswith(ADDED_SENSOR_PREFIX):
            continue
        compared += 1
        j = mujoco.mj_name2id(candidate, sensor, name)
        if j < 0:
            sensors.append(f"{name}: missing")
            continue
        for field in plain:
            if not np.array_equal(getattr(reference, field)[i], getattr(candidate, field)[j]):
                sensors.append(f"{name}.{field}")
        for field, kind in (("sensor_objid", "sensor_objtype"), ("sensor_refid", "sensor_reftype")):
            mine = _named(reference, int(getattr(reference, kind)[i]), int(getattr(reference, field)[i]))
            theirs = _named(candidate, int(getattr(candidate, kind)[j]), int(getattr(candidate, field)[j]))
            if mine != theirs:
                sensors.append(f"{name}.{field}")
    return {"whole_fields": whole, "fields": differ, "options": options, "colliding_geoms": int(ref_geoms.size),
            "geoms": geoms, "sensors_compared": compared, "sensors": sensors}


def device_options(backend: Any, reference: Any) -> list[str]:
    """The solver options MuJoCo Warp's device model holds that differ from the reference MjModel's."""
    opt = backend.model.opt
    differ = []
    for name in ("iterations", "ls_iterations", "cone", "solver", "integrator", "disableflags", "enableflags"):
        if int(getattr(opt, name)) != int(getattr(reference.opt, name)):
            differ.append(name)
    for name in ("timestep", "tolerance", "ls_tolerance"):
        want = getattr(reference.opt, name)
        if name == "tolerance":  # MuJoCo Warp's put_model: max(tolerance, 1e-6), its float32 floor
            want = max(want, DEVICE_TOLERANCE_FLOOR)
        if not np.allclose(np.asarray(getattr(opt, name).numpy(), np.float64), want, rtol=1.2e-7, atol=0.0):
            differ.append(name)
    impratio = 1.0 / float(np.asarray(opt.impratio_invsqrt.numpy()).reshape(-1)[0]) ** 2
    if not np.isclose(impratio, reference.opt.impratio, rtol=1e-6):
        differ.append("impratio")
    return differ


def model_rows(backend: Any, field: str, num_envs: int) -> np.ndarray | None:
    """A model field per env row: MuJoCo's batch field, or MuJoCo Warp's device array (None where absent)."""
    if hasattr(backend, "_pool"):  # MuJoCo: mjbatch's per-env model fields
        rows = np.asarray(backend._pool.expand(field), dtype=np.float64)  # noqa: SLF001
        host_model = backend._model  # noqa: SLF001
    else:
        model = backend.model
        array = getattr(model.opt if field == "gravity" else model, field, None)
        if array is None:
            return None
        host = np.asarray(array.numpy(), dtype=np.float64)
        rows = np.broadcast_to(host, (num_envs, *host.shape[1:]))
        host_model = backend._cpu_model  # noqa: SLF001
    if field.startswith("geom_"):  # the colliding geoms only (module docstring, item 1)
        rows = rows[:, (host_model.geom_contype != 0) | (host_model.geom_conaffinity != 0)]
    return rows.reshape(num_envs, -1)


def reset_differences(reference_env: Any, candidate_env: Any, num_envs: int) -> dict[str, Any]:
    """Both envs' ``init_state`` with the same seed: qpos, qvel and every randomized model row (module item 3)."""
    reference_env.init_state()
    candidate_env.init_state()
    reference, candidate = reference_env._backend, candidate_env._backend  # noqa: SLF001
    state = {"ref": reference.get_state(("qpos", "qvel")), "cand": candidate.get_state(("qpos", "qvel"))}
    differ, largest, compared = [], {}, []
    for key in ("qpos", "qvel"):
        mine, theirs = (np.asarray(state[s][key], np.float64) for s in ("ref", "cand"))
        largest[key] = float(np.abs(mine - theirs).max())
        if not np.array_equal(mine, theirs):
            differ.append(key)
    for field in RESET_FIELDS:
        mine, theirs = model_rows(reference, field, num_envs), model_rows(candidate, field, num_envs)
        if mine is None or theirs is None:
            continue
        compared.append(field)
        largest[field] = float(np.abs(mine - theirs).max())
        # float32: MuJoCo Warp holds (and adds a randomized offset to) float32 values, so equal within a few
        # roundings of the field's largest magnitude
        scale = max(float(np.abs(mine).max()), np.finfo(np.float32).tiny)
        if mine.shape != theirs.shape or float(np.abs(mine - theirs).max()) > 4 * np.finfo(np.float32).eps * scale:
            differ.append(field)
    return {"compared": compared, "differ": differ, "largest_abs_difference": largest}


def one_step(args: Args, states: dict[str, np.ndarray], reference: Any, candidate: Any, substeps: int,
             contacts: tuple[str, ...]) -> dict[str, Any]:
    """Step both backends from every sampled state; relative-error and contact statistics and the verdict."""
    errors: dict[str, list[np.ndarray]] = {"qpos": [], "qvel": []}
    absolute: dict[str, float] = {"qpos": 0.0, "qvel": 0.0}
    flags: dict[str, list[np.ndarray]] = {"ref": [], "cand": []}
    for qpos, qvel, ctrl in zip(states["qpos"], states["qvel"], states["ctrl"]):
        shifted = ctrl.copy()
        shifted[:, 0] += args.perturb_ctrl
        want = step_from(reference, substeps, qpos, qvel, ctrl, contacts)
        got = step_from(candidate, substeps, qpos, qvel, shifted, contacts)
        flags["ref"].append(want["contacts"])
        flags["cand"].append(got["contacts"])
        for key, start in (("qpos", qpos), ("qvel", qvel)):
            errors[key].append(relative_errors(start.astype(np.float64), want[key], got[key], MOTION_FLOOR[key]))
            absolute[key] = max(absolute[key], float(np.abs(got[key] - want[key]).max()))
    stats: dict[str, Any] = {}
    passed = True
    for key, values in errors.items():
        flat = np.concatenate(values)
        at_quantile = float(np.quantile(flat, args.quantile))
        ok = bool(np.isfinite(flat).all() and at_quantile <= args.tolerance)
        passed &= ok
        stats[key] = {"rows": int(flat.size), "median": float(np.median(flat)), f"q{args.quantile}": at_quantile,
                      "max": float(flat.max()), "max_abs_error": absolute[key], "passed": ok}
    mine, theirs = np.concatenate(flags["ref"]), np.concatenate(flags["cand"])
    mismatched = int((mine != theirs).sum())
    share = mismatched / max(mine.size, 1)
    contact = {"sensors": list(contacts), "pairs": int(mine.size), "in_contact": int(mine.sum()),
               "mismatched": mismatched, "mismatched_share": share, "passed": bool(share <= 1.0 - args.quantile)}
    passed &= contact["passed"]
    return {"passed": passed, "relative_error": stats, "contacts": contact}


def compare(args: Args, states: dict[str, np.ndarray]) -> dict[str, Any]:
    """The model, one step on the default rows, the reset, one step on the reset rows (module docstring)."""
    reference_env = build_env(args.num_envs, args.seed, f"{args.task}/mujoco")
    candidate_task = f"{args.task}/mujoco" if args.mujoco_both else f"{args.task}/mjwarp"
    candidate_env = build_env(args.num_envs, args.seed, candidate_task, args.candidate_override)
    substeps, candidate_substeps = reference_env.cfg.sim_substeps, candidate_env.cfg.sim_substeps
    if candidate_substeps != substeps:
        raise RuntimeError(f"substeps differ: mujoco {substeps}, {candidate_task} {candidate_substeps}")
    reference, candidate = reference_env._backend, candidate_env._backend  # noqa: SLF001
    cand_model = candidate._model if args.mujoco_both else candidate._cpu_model  # noqa: SLF001
    model = model_differences(reference._model, cand_model)  # noqa: SLF001
    model["device_options"] = [] if args.mujoco_both else device_options(candidate, reference._model)  # noqa: SLF001
    model["passed"] = not any(model[k] for k in ("fields", "options", "geoms", "sensors", "device_options"))
    contacts = FOOT_CONTACTS.get(args.task, ())
    started = time.perf_counter()
    default_rows = one_step(args, states, reference, candidate, substeps, contacts)
    reset = reset_differences(reference_env, candidate_env, args.num_envs)
    reset["passed"] = not reset["differ"]
    after_reset = one_step(args, states, reference, candidate, substeps, contacts)
    reference_env.close()
    candidate_env.close()
    passed = model["passed"] and default_rows["passed"] and reset["passed"] and after_reset["passed"]
    return {"passed": passed, "substeps": substeps, "candidate_task": candidate_task,
            "compare_s": time.perf_counter() - started, "model": model, "relative_error": default_rows["relative_error"],
            "contacts": default_rows["contacts"], "reset": reset,
            "relative_error_after_reset": after_reset["relative_error"], "contacts_after_reset": after_reset["contacts"]}


def device_facts() -> dict[str, Any]:
    """Warp's device for the MJWarp side and the versions that produced the numbers."""
    from importlib import metadata

    facts: dict[str, Any] = {}
    for dist in ("mujoco", "mujoco-warp", "warp-lang", "unisim-core", "unilab"):
        try:
            facts[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            facts[dist] = None
    try:
        import warp

        facts["warp_device"] = str(warp.get_device())
        facts["warp_device_name"] = warp.get_device().name
    except Exception as exc:  # noqa: BLE001 - recorded, the comparison itself reports the failure
        facts["warp_device"] = f"unavailable: {exc}"
    return facts


def parse_args(argv: list[str] | None) -> tuple[Args, Path]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in asdict(Args()).items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            p.add_argument(flag, action="store_true")
        elif isinstance(value, tuple):
            p.add_argument(flag, action="append", default=[], metavar="KEY=VALUE")
        elif name == "task":
            p.add_argument(flag, choices=sorted(FOOT_CONTACTS), default=value)
        else:
            p.add_argument(flag, type=type(value), default=value)
    p.add_argument("--output", type=Path, required=True)
    ns = p.parse_args(argv)
    output = ns.output
    del ns.output
    args = Args(**{**vars(ns), "candidate_override": tuple(ns.candidate_override)})
    if args.num_envs <= 0 or args.source_steps <= 0 or args.every <= 0 or not 0 < args.quantile <= 1:
        p.error("--num-envs, --source-steps and --every must be positive and 0 < --quantile <= 1")
    return args, output


def main(argv: list[str] | None = None) -> int:
    args, output = parse_args(argv)
    if not Path("src/unilab/conf/flashsac/config.yaml").is_file():
        print(f"mjwarp_agreement: run from a UniLab tree root (no src/unilab/conf/flashsac/config.yaml in "
              f"{os.getcwd()})", file=sys.stderr)
        return 2
    states = sample_states(args)
    result = {"args": asdict(args), "states": int(states["qpos"].shape[0]), **compare(args, states),
              "versions": device_facts()}
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    failed = [part for part in ("model", "reset", "contacts", "contacts_after_reset") if not result[part]["passed"]]
    failed += [f"{group}.{k}" for group in ("relative_error", "relative_error_after_reset")
               for k, v in result[group].items() if not v["passed"]]
    print(f"mjwarp_agreement: {args.task} {'passed' if result['passed'] else 'FAILED'} "
          + " ".join(f"{k} q{args.quantile}={v[f'q{args.quantile}']:.3g} (max abs {v['max_abs_error']:.3g})"
                     for k, v in result["relative_error"].items())
          + f"; after reset " + " ".join(f"{k} q{args.quantile}={v[f'q{args.quantile}']:.3g}"
                                         for k, v in result["relative_error_after_reset"].items())
          + f"; contacts mismatched {result['contacts']['mismatched']}/{result['contacts']['pairs']}"
          + f", after reset {result['contacts_after_reset']['mismatched']}/{result['contacts_after_reset']['pairs']}"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
