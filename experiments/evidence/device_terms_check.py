#!/usr/bin/env python3
"""Each term's torch twin (``flashsac_runtime.envs.terms``) against UniLab's NumPy term, on one state.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH`` (``tests/test_device_terms.py`` runs it).
``--task`` names the task:

- ``g1_walk_flat/mjwarp`` (the default) on Warp's CPU device (``UNISIM_MJWARP_ALLOW_CPU=1``): the device env
  factory builds G1 Walk Flat's UniLab env on the ``mjwarp`` backend and binds the twins to its config; the twins
  read the device env's state, whose physics views (the same MuJoCo Warp arrays) are given the values UniLab's terms
  read (its backend's host copies of qpos, qvel and the sensors; put back afterwards).
- ``go2_joystick_flat/mujoco``: Go2 Joystick Flat's own owner in UniLab 1.3.2 (its MuJoCo Warp owner is the series'
  and trains on the device env), so its UniLab env runs on CPU MuJoCo, and the twins read a ``DeviceEnvState`` whose
  physics is ``HostPhysics``: torch views sharing the memory of the arrays UniLab's terms read there (the backend's
  qpos, qvel and sensordata, the tracked-body sensors of the root body among them). The Go2 meshes are the test
  assets' (``base_4.obj`` is a placeholder of a visual-only geom, so the physics are the real model's).
- ``g1_motion_tracking/mujoco``: G1 motion tracking on CPU MuJoCo the same way, with the motion command's state
  (``device_terms_motion.py``: the reference copied from UniLab's command, the relative state the twins' own,
  derived where UniLab derives its). The tree needs a motion clip (``scripts/offline/motion_clip.py`` writes the
  synthetic one).

The UniLab env then steps itself (``env.step``, its own NumPy draws and autoreset) with seeded uniform actions for
``--steps`` steps of ``--episode-seconds`` episodes (terminations, time-outs and resets within the run). Inside each
step, once UniLab has computed its rewards (the physics stepped, the state read, nothing reset yet), every
observation, reward and termination term of the config is called twice on that one state: UniLab's term (its
``func`` with its params) on the env, and its twin (``terms.twin_of``, its params as ``terms.device_params`` makes
them) on the state, whose env buffers (actions, command, gait phase, episode length) are copied from UniLab's
managers and terms at that moment. Each term's outputs are compared: terminations equal, observations and rewards
within ``TERM_RTOL`` of the NumPy value's magnitude (at least 1; float32 rounding of another ``exp`` or sum order,
not a changed term). Also the twins of ``terms._unilab_terms`` the config does not use are listed.

``--perturb TERM:PARAM`` scales that term's parameter by 1.001 on the twin's side: the negative control, which must
fail that term and only it. Every run also binds two reward terms without a twin after the task's own (G1: into the
device env's reward binding; Go2 and motion tracking: through ``twin_of``, in the config's order): the refusal
must be one line naming the first (``refusal``).

Prints one JSON; exit 0 when every term holds, 1 when one does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_env_build import compose_cfg  # noqa: E402

TASKS = ("g1_walk_flat/mjwarp", "go2_joystick_flat/mujoco", "g1_motion_tracking/mujoco")

#: Largest difference allowed between a float term's twin and UniLab's term, relative to the NumPy value's magnitude
#: (at least 1): float32 rounding (UniLab computes in float32; ulp of 1 is 1.2e-7), never a changed parameter (the
#: control's 0.1 % moves a term by far more).
TERM_RTOL = 1e-6


class TermComparison:
    """One term's comparison over the run: whether every call was bitwise, the largest differences, the first
    step outside the tolerance."""

    def __init__(self, kind: str, name: str) -> None:
        self.kind, self.name = kind, name
        self.bitwise, self.max_abs, self.max_rel, self.first_failure = True, 0.0, 0.0, None
        self.true_count = 0  # UniLab's nonzero outputs (a termination that fired, a contact count that counted)

    def compare(self, step: int, reference: np.ndarray, twin: torch.Tensor) -> None:
        ref = torch.as_tensor(np.asarray(reference))
        got = twin.detach().cpu()
        if ref.shape != got.shape:
            self.bitwise = False
            self.first_failure = step if self.first_failure is None else self.first_failure
            return
        if ref.dtype == torch.bool or got.dtype == torch.bool:
            same = torch.equal(ref.to(torch.bool), got.to(torch.bool))
            self.true_count += int(ref.to(torch.bool).sum())
            self.bitwise &= same
            if not same and self.first_failure is None:
                self.first_failure = step
            return
        self.true_count += int((ref != 0).sum())
        diff = (ref.double() - got.double()).abs()
        rel = diff / ref.double().abs().clamp_min(1.0)
        self.bitwise &= bool((diff == 0).all())
        self.max_abs = max(self.max_abs, float(diff.max()) if diff.numel() else 0.0)
        self.max_rel = max(self.max_rel, float(rel.max()) if rel.numel() else 0.0)
        if (rel > TERM_RTOL).any() and self.first_failure is None:
            self.first_failure = step

    def result(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "bitwise": self.bitwise, "max_abs_diff": self.max_abs,
                "max_rel_diff": self.max_rel, "first_failure_step": self.first_failure, "true_count": self.true_count}


def config_terms(env: Any) -> list[tuple[str, str, Any, dict[str, Any]]]:
    """(kind, name, UniLab's func, its params) of every term of the config, in the managers' order; a name seen in
    both observation groups is compared once per group."""
    out = []
    obs = env.observation_manager
    for group in obs._group_obs_term_names:  # noqa: SLF001
        for name, cfg in zip(obs._group_obs_term_names[group], obs._group_obs_term_cfgs[group], strict=True):  # noqa: SLF001
            out.append(("observation", f"{group}/{name}", cfg.func, dict(cfg.params)))
    for kind, manager in (("reward", env.reward_manager), ("termination", env.termination_manager)):
        for name, cfg in zip(manager._term_names, manager._term_cfgs, strict=True):  # noqa: SLF001
            out.append((kind, name, cfg.func, dict(cfg.params)))
    return out


def bound_terms(env: Any, device: torch.device) -> list[tuple[str, str, Any, dict[str, Any], dict[str, Any], Any]]:
    """(kind, name, UniLab's func, its params, the twin's params, the twin) of every term of the config."""
    from flashsac_runtime.envs import terms as T

    return [(kind, name, func, params, T.device_params(params, device), T.twin_of(kind, name, func))
            for kind, name, func, params in config_terms(env)]


class G1Task:
    """G1 Walk Flat: UniLab's env on MuJoCo Warp (Warp's CPU device) inside its device env."""

    def __init__(self, args: argparse.Namespace) -> None:
        from flashsac_runtime.envs import make_g1_walk_device_env
        from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

        cfg = compose_cfg(args.num_envs, args.seed, (f"env.max_episode_seconds={args.episode_seconds}", *args.override))
        override = build_offpolicy_env_cfg_override("flashsac", cfg)
        self.dev = make_g1_walk_device_env(args.num_envs, torch.device("cpu"), args.seed, env_cfg_override=override,
                                           numpy_draws=True, graph=False, draws_ahead=False,
                                           reset_only_when_done=False, step_split=False)
        self.env, self.state, self.action_dim = self.dev.host_env, self.dev.state, self.dev.action_dim
        self._held: dict[str, torch.Tensor] = {}

    def before_twins(self) -> None:
        """The device env's buffers as UniLab's managers hold them now, and its physics views set to the values
        UniLab's terms read now (its backend's host copies of this step's state); what they held is kept."""
        from unilab.tasks.locomotion.g1.manager_terms import _GAIT_CONTEXTS

        env, s = self.env, self.state
        sync_managers(env, s)
        s.gait_phase.copy_(torch.as_tensor(np.asarray(_GAIT_CONTEXTS[env].phase)))
        backend = env._backend  # noqa: SLF001 - the state UniLab's terms read
        host = backend.get_state(("qpos", "qvel"))
        read = {"qpos": host["qpos"], "qvel": host["qvel"], "sensordata": backend._sensor_cache}  # noqa: SLF001
        for name, values in read.items():
            view = getattr(self.dev.sim, name)
            self._held[name] = view.clone()
            view.copy_(torch.as_tensor(np.asarray(values)).to(view.dtype))

    def after_twins(self) -> None:
        for name, values in self._held.items():  # the physics goes on from its own arrays
            getattr(self.dev.sim, name).copy_(values)

    def refusal(self) -> str | None:
        """The device env's reward binding given two reward terms without a twin after one with a twin: its one-line
        refusal (it must name the first of the two)."""
        from types import SimpleNamespace

        from unilab.envs import mdp
        from unilab.tasks.locomotion.common import sensor_reward_terms as sensor

        dev = self.dev
        supported = dev.host_env.reward_manager._term_cfgs[0]  # noqa: SLF001
        manager = SimpleNamespace(_scale_by_dt=True,
                                  _term_names=["supported", "penalty_lin_vel_z", "penalty_action_acc"],
                                  _term_cfgs=[supported,
                                              # a class term, as materialized (an instance; its state is not read)
                                              SimpleNamespace(func=object.__new__(sensor.lin_vel_z), params={},
                                                              weight=-1.0),
                                              SimpleNamespace(func=mdp.action_acc_l2, params={}, weight=-1.0)])
        try:
            type(dev)._bind_rewards(dev, SimpleNamespace(reward_manager=manager))  # noqa: SLF001
        except ValueError as exc:
            return str(exc)
        return None


class HostPhysics:
    """Torch views of a CPU MuJoCo backend's qpos, qvel and sensordata, sharing their memory (``torch.from_numpy``):
    the arrays UniLab's terms read on that backend (joint state, named sensors, the tracked-body sensors). Made
    again at each read, so a backend that rebinds its arrays is followed."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.slots = {name: (int(cols[0]), len(cols)) for name, cols in backend._sensor_indices.items()}  # noqa: SLF001

    @property
    def qpos(self) -> torch.Tensor:
        return torch.from_numpy(self._backend._qpos_view)  # noqa: SLF001

    @property
    def qvel(self) -> torch.Tensor:
        return torch.from_numpy(self._backend._qvel_view)  # noqa: SLF001

    @property
    def sensordata(self) -> torch.Tensor:
        return torch.from_numpy(self._backend._sensor_data)  # noqa: SLF001

    def sensor(self, name: str) -> torch.Tensor:
        start, dim = self.slots[name]
        return self.sensordata[:, start:start + dim]


def host_env(args: argparse.Namespace) -> Any:
    """UniLab's env of ``args.task`` on its owner's backend (composed as the training command line does)."""
    from hydra import compose, initialize_config_dir
    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            f"task={args.task}", f"algo.num_envs={args.num_envs}", f"algo.seed={args.seed}",
            f"env.max_episode_seconds={args.episode_seconds}", *args.override])
    override = build_offpolicy_env_cfg_override("flashsac", cfg)
    np.random.seed(args.seed)  # the collector's apply_training_seed
    env = make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), args.num_envs,
                            {**(override or {}), "seed": args.seed})
    env.init_state()
    return env


def host_state(env: Any, **extra: Any) -> Any:
    """A ``DeviceEnvState`` on ``HostPhysics`` of a CPU MuJoCo env: its joint columns, defaults, root body and
    buffers shaped as the env's (the command as wide as its command term's); ``extra`` sets the other fields."""
    import mujoco
    from flashsac_runtime.envs import terms as T

    backend = env._backend  # noqa: SLF001
    data = env.scene["robot"].data
    root_q, root_v = int(backend._root_qpos_dim), int(backend._root_qvel_dim)  # noqa: SLF001
    joint_q = np.arange(backend._num_dof_pos)[data._joint_pos_index] + root_q  # noqa: SLF001
    joint_v = np.arange(backend._num_dof_vel)[data._joint_vel_index] + root_v  # noqa: SLF001
    root_body = mujoco.mj_id2name(backend._model, mujoco.mjtObj.mjOBJ_BODY, int(data._root_body_ids[0]))  # noqa: SLF001
    n, action_dim = int(env.num_envs), int(env.action_manager.action.shape[1])
    (command,) = env.command_manager.active_terms
    command_dim = int(np.asarray(env.command_manager.get_command(command)).shape[1])
    return T.DeviceEnvState(
        sim=HostPhysics(backend),
        joint_qpos_cols=torch.as_tensor(joint_q), joint_qvel_cols=torch.as_tensor(joint_v),
        root_qpos_cols=torch.arange(root_q),
        default_joint_pos=torch.as_tensor(np.array(data.default_joint_pos)),
        default_joint_vel=torch.as_tensor(np.array(data.default_joint_vel)),
        action=torch.zeros((n, action_dim)), prev_action=torch.zeros((n, action_dim)),
        command=torch.zeros((n, command_dim)), gait_phase=torch.zeros((n, 2)),  # G1's gait phase: read by none
        episode_length=torch.zeros(n, dtype=torch.int64), max_episode_length=int(env.max_episode_length),
        root_body=root_body, **extra)


class Go2Task:
    """Go2 Joystick Flat: UniLab's env on CPU MuJoCo (the task's one owner), the twins on ``HostPhysics``."""

    def __init__(self, args: argparse.Namespace) -> None:
        from unilab.tasks.locomotion.common.manager_terms import _GaitTerm

        self.env = env = host_env(args)
        self.state = host_state(env, quadruped_phase=torch.zeros(int(env.num_envs)))
        self.action_dim = int(self.state.action.shape[1])
        # UniLab's gait terms (the phase observation of each group, the foot-phase rewards) each keep the phase;
        # the twins read one (``DeviceEnvState.quadruped_phase``), so the check records that they agree.
        self._gait_terms = [func for _, _, func, _ in config_terms(env) if isinstance(func, _GaitTerm)]
        self.gait_terms_agree = True

    def before_twins(self) -> None:
        sync_managers(self.env, self.state)
        phases = [np.asarray(term._phase_value) for term in self._gait_terms]  # noqa: SLF001
        self.gait_terms_agree &= all(np.array_equal(phases[0], phase) for phase in phases)
        self.state.quadruped_phase.copy_(torch.as_tensor(phases[0]))

    def after_twins(self) -> None:
        pass

    def refusal(self) -> str | None:
        """The config's reward terms, then two without a twin, bound through ``twin_of`` in that order: the one-line
        refusal (it must name the first of the two)."""
        from unilab.tasks.locomotion.common import manager_terms as loco

        # a class term, as materialized (an instance; its state is not read)
        return reward_refusal(self.env, [("stand_still", loco.stand_still_l1),
                                         ("feet_air", object.__new__(loco.feet_air_while_standing))])


def reward_refusal(env: Any, untwinned: list[tuple[str, Any]]) -> str | None:
    """The config's reward terms, then ``untwinned`` (terms without a twin), bound through ``twin_of`` in that
    order: the one-line refusal, or None where every term bound."""
    from flashsac_runtime.envs import terms as T

    rewards = [(name, func) for kind, name, func, _ in config_terms(env) if kind == "reward"] + untwinned
    try:
        for name, func in rewards:
            T.twin_of("reward", name, func)
    except ValueError as exc:
        return str(exc)
    return None


def sync_managers(env: Any, s: Any) -> None:
    """The state's actions, command and episode lengths as UniLab's managers hold them now."""
    actions = env.action_manager
    s.action.copy_(torch.as_tensor(np.asarray(actions.action)))
    s.prev_action.copy_(torch.as_tensor(np.asarray(actions.prev_action)))
    (command,) = env.command_manager.active_terms
    s.command.copy_(torch.as_tensor(np.asarray(env.command_manager.get_command(command))))
    s.episode_length.copy_(torch.as_tensor(np.asarray(env.episode_length_buf)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=TASKS, default=TASKS[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--episode-seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--action-seed", type=int, default=7)
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a Hydra override of the task config (both sides read the changed config)")
    parser.add_argument("--perturb", default=None, metavar="TERM:PARAM",
                        help="the negative control: that term's parameter scaled by 1.001 on the twin's side")
    args = parser.parse_args(argv)

    from flashsac_runtime.envs import terms as T

    if args.task == "g1_motion_tracking/mujoco":
        from device_terms_motion import MotionTask  # the motion command's state, copied into the twins' state

        task: Any = MotionTask(args)
    else:
        task = G1Task(args) if args.task == "g1_walk_flat/mjwarp" else Go2Task(args)
    env = task.env
    terms = bound_terms(env, torch.device("cpu"))
    if args.perturb:
        term, param = args.perturb.split(":")
        names = [name for _, name, *_ in terms]
        index = names.index(term)
        kind, name, func, params, twin_params, twin = terms[index]
        terms[index] = (kind, name, func, params, {**twin_params, param: twin_params[param] * 1.001}, twin)
    compared = {(kind, name): TermComparison(kind, name) for kind, name, *_ in terms}
    step = [0]
    done_rows = [0]

    def compare_terms() -> None:
        # inside UniLab's step (its state-read phase): the terms read the state as the step's own terms do
        reference = {(kind, name): np.array(func(env, **params), copy=True) for kind, name, func, params, _, _ in terms}
        task.before_twins()
        for kind, name, _, _, twin_params, twin in terms:
            compared[(kind, name)].compare(step[0], reference[(kind, name)], twin(task.state, **twin_params))
        task.after_twins()

    reward_compute = env.reward_manager.compute

    def compute_then_compare(*a: Any, **k: Any) -> Any:
        result = reward_compute(*a, **k)
        compare_terms()
        return result

    env.reward_manager.compute = compute_then_compare
    actions = np.random.default_rng(args.action_seed).uniform(
        -1.0, 1.0, (args.steps, args.num_envs, task.action_dim)).astype(np.float32)
    for t in range(args.steps):
        step[0] = t
        state = env.step(actions[t])
        done_rows[0] += int((state.terminated | state.truncated).sum())
    tables = T._unilab_terms()  # noqa: SLF001
    used = {entry[5] for entry in terms}
    unused = sorted(f"{kind}:{getattr(key, '__module__', '?')}.{getattr(key, '__qualname__', key)}"
                    for kind, table in zip(("observation", "reward", "termination"), tables, strict=True)
                    for key, twin in table.items() if twin not in used)
    results = [c.result() for c in compared.values()]
    failed = [f"{r['kind']}:{r['name']}" for r in results if r["first_failure_step"] is not None]
    out = {"task": args.task, "override": args.override, "num_envs": args.num_envs, "steps": args.steps, "done_rows": done_rows[0],
           "perturb": args.perturb, "tolerance": {"float_rel": TERM_RTOL, "bool": "equal"}, "terms": results,
           "failed": failed, "twins_unused_by_the_config": unused, "refusal": task.refusal(), "holds": not failed}
    if isinstance(task, Go2Task):
        out["gait_terms"] = {"count": len(task._gait_terms), "phases_agree": task.gait_terms_agree}  # noqa: SLF001
    print(json.dumps(out))
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
