#!/usr/bin/env python3
"""Each G1 Walk Flat term's torch twin (``flashsac_runtime.envs.terms``) against UniLab's NumPy term, on one state.

Run from a UniLab tree root with the overlay first on ``PYTHONPATH`` (``tests/test_device_terms.py`` runs it on
Warp's CPU device, ``UNISIM_MJWARP_ALLOW_CPU=1``). The device env factory builds G1 Walk Flat's UniLab env on the
``mjwarp`` backend and binds the twins to its config; that UniLab env then steps itself (``env.step``, its own
NumPy draws and autoreset) with seeded uniform actions for ``--steps`` steps of ``--episode-seconds`` episodes
(terminations, time-outs and resets within the run). Inside each step, once UniLab has computed its rewards (the
physics stepped, the state read, nothing reset yet), every observation, reward and termination term of the config
is called twice on that one state: UniLab's term (its ``func`` with its params) on the env, and its twin
(``terms.twin_of``) on the device env's state, whose physics views (the same MuJoCo Warp arrays) are given the
values UniLab's terms read (its backend's host copies of qpos, qvel and the sensors; put back afterwards) and whose
env buffers (actions, command, gait phase, episode length) are copied from UniLab's managers at that moment. Each
term's outputs are compared: terminations equal, observations and rewards within ``TERM_RTOL`` of the NumPy value's
magnitude (at least 1; float32 rounding of another ``exp`` or sum order, not a changed term). Also the twins of
``terms._unilab_terms`` the config does not use are listed (they are compared by no run here).

``--perturb TERM:PARAM`` scales that term's parameter by 1.001 on the twin's side: the negative control, which must
fail that term and only it. Every run also binds two reward terms without a twin into the device env's reward
binding: the refusal must be one line naming the first (``refusal``).

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

    def compare(self, step: int, reference: np.ndarray, twin: torch.Tensor) -> None:
        ref = torch.as_tensor(np.asarray(reference))
        got = twin.detach().cpu()
        if ref.shape != got.shape:
            self.bitwise = False
            self.first_failure = step if self.first_failure is None else self.first_failure
            return
        if ref.dtype == torch.bool or got.dtype == torch.bool:
            same = torch.equal(ref.to(torch.bool), got.to(torch.bool))
            self.bitwise &= same
            if not same and self.first_failure is None:
                self.first_failure = step
            return
        diff = (ref.double() - got.double()).abs()
        rel = diff / ref.double().abs().clamp_min(1.0)
        self.bitwise &= bool((diff == 0).all())
        self.max_abs = max(self.max_abs, float(diff.max()) if diff.numel() else 0.0)
        self.max_rel = max(self.max_rel, float(rel.max()) if rel.numel() else 0.0)
        if (rel > TERM_RTOL).any() and self.first_failure is None:
            self.first_failure = step

    def result(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "bitwise": self.bitwise, "max_abs_diff": self.max_abs,
                "max_rel_diff": self.max_rel, "first_failure_step": self.first_failure}


def bound_terms(env: Any, dev: Any) -> list[tuple[str, str, Any, dict[str, Any], dict[str, Any]]]:
    """(kind, name, UniLab's func, its params, the twin's params) of every term of the config, in the managers'
    order; a name seen in both observation groups is compared once per group."""
    from flashsac_runtime.envs import terms as T

    out = []
    obs = env.observation_manager
    for group in obs._group_obs_term_names:  # noqa: SLF001
        for name, cfg in zip(obs._group_obs_term_names[group], obs._group_obs_term_cfgs[group], strict=True):  # noqa: SLF001
            out.append(("observation", f"{group}/{name}", cfg.func, dict(cfg.params), dict(cfg.params)))
    rewards = env.reward_manager
    for name, cfg in zip(rewards._term_names, rewards._term_cfgs, strict=True):  # noqa: SLF001
        out.append(("reward", name, cfg.func, dict(cfg.params), dev._device_params(cfg.params)))  # noqa: SLF001
    terminations = env.termination_manager
    for name, cfg in zip(terminations._term_names, terminations._term_cfgs, strict=True):  # noqa: SLF001
        out.append(("termination", name, cfg.func, dict(cfg.params), dict(cfg.params)))
    return [(kind, name, func, params, twin_params, T.twin_of(kind, name, func))
            for kind, name, func, params, twin_params in out]


def physics_as_read(env: Any, dev: Any) -> dict[str, torch.Tensor]:
    """The device env's physics views (qpos, qvel, sensordata) set to the values UniLab's terms read now (its
    backend's host copies of this step's state); returns what they held, to be put back after the twins ran."""
    backend = env._backend  # noqa: SLF001 - the state UniLab's terms read
    host = backend.get_state(("qpos", "qvel"))
    read = {"qpos": host["qpos"], "qvel": host["qvel"], "sensordata": backend._sensor_cache}  # noqa: SLF001
    held = {}
    for name, values in read.items():
        view = getattr(dev.sim, name)
        held[name] = view.clone()
        view.copy_(torch.as_tensor(np.asarray(values)).to(view.dtype))
    return held


def sync_env_buffers(env: Any, dev: Any) -> None:
    """The device env's own buffers as UniLab's managers hold them now."""
    from unilab.tasks.locomotion.g1.manager_terms import _GAIT_CONTEXTS

    s = dev.state
    actions = env.action_manager
    s.action.copy_(torch.as_tensor(np.asarray(actions.action)))
    s.prev_action.copy_(torch.as_tensor(np.asarray(actions.prev_action)))
    (command,) = env.command_manager.active_terms
    s.command.copy_(torch.as_tensor(np.asarray(env.command_manager.get_command(command))))
    s.gait_phase.copy_(torch.as_tensor(np.asarray(_GAIT_CONTEXTS[env].phase)))
    s.episode_length.copy_(torch.as_tensor(np.asarray(env.episode_length_buf)))


def refusal(dev: Any) -> str | None:
    """The device env's reward binding given two reward terms without a twin after one with a twin: its one-line
    refusal (it must name the first of the two)."""
    from types import SimpleNamespace

    from unilab.envs import mdp
    from unilab.tasks.locomotion.common import sensor_reward_terms as sensor

    supported = dev.host_env.reward_manager._term_cfgs[0]  # noqa: SLF001
    manager = SimpleNamespace(_scale_by_dt=True, _term_names=["supported", "penalty_lin_vel_z", "penalty_action_acc"],
                              _term_cfgs=[supported,
                                          # a class term, as materialized (an instance; its state is not read)
                                          SimpleNamespace(func=object.__new__(sensor.lin_vel_z), params={}, weight=-1.0),
                                          SimpleNamespace(func=mdp.action_acc_l2, params={}, weight=-1.0)])
    try:
        type(dev)._bind_rewards(dev, SimpleNamespace(reward_manager=manager))  # noqa: SLF001
    except ValueError as exc:
        return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--episode-seconds", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--action-seed", type=int, default=7)
    parser.add_argument("--perturb", default=None, metavar="TERM:PARAM",
                        help="the negative control: that term's parameter scaled by 1.001 on the twin's side")
    args = parser.parse_args(argv)

    from flashsac_runtime.envs import make_g1_walk_device_env
    from flashsac_runtime.envs import terms as T
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    cfg = compose_cfg(args.num_envs, args.seed, (f"env.max_episode_seconds={args.episode_seconds}",))
    override = build_offpolicy_env_cfg_override("flashsac", cfg)
    dev = make_g1_walk_device_env(args.num_envs, torch.device("cpu"), args.seed, env_cfg_override=override,
                                  numpy_draws=True, graph=False, draws_ahead=False, reset_only_when_done=False,
                                  step_split=False)
    env = dev.host_env
    terms = bound_terms(env, dev)
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
        sync_env_buffers(env, dev)
        held = physics_as_read(env, dev)
        for kind, name, _, _, twin_params, twin in terms:
            compared[(kind, name)].compare(step[0], reference[(kind, name)], twin(dev.state, **twin_params))
        for name, values in held.items():  # the physics goes on from its own arrays
            getattr(dev.sim, name).copy_(values)

    reward_compute = env.reward_manager.compute

    def compute_then_compare(*a: Any, **k: Any) -> Any:
        result = reward_compute(*a, **k)
        compare_terms()
        return result

    env.reward_manager.compute = compute_then_compare
    actions = np.random.default_rng(args.action_seed).uniform(
        -1.0, 1.0, (args.steps, args.num_envs, dev.action_dim)).astype(np.float32)
    for t in range(args.steps):
        step[0] = t
        state = env.step(actions[t])
        done_rows[0] += int((state.terminated | state.truncated).sum())
    tables = T._unilab_terms()  # noqa: SLF001
    unused = sorted(f"{kind}:{getattr(key, '__qualname__', key)}"
                    for kind, table in zip(("observation", "reward", "termination"), tables, strict=True)
                    for key, twin in table.items() if twin not in {entry[5] for entry in terms})
    results = [c.result() for c in compared.values()]
    failed = [f"{r['kind']}:{r['name']}" for r in results if r["first_failure_step"] is not None]
    print(json.dumps({"num_envs": args.num_envs, "steps": args.steps, "done_rows": done_rows[0],
                      "perturb": args.perturb, "tolerance": {"float_rel": TERM_RTOL, "bool": "equal"},
                      "terms": results, "failed": failed, "twins_unused_by_the_config": unused,
                      "refusal": refusal(dev), "holds": not failed}))
    return 0 if not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
