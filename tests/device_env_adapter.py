"""UniLab's real NumPy G1 Walk Flat env (CPU MuJoCo) behind uni_rl's DeviceVecEnv contract, for CPU tests.

No fake env: every observation, reward, done and final observation comes from UniLab's own env stepping
MuJoCo, built as the host collector builds it (`experiments/profile/collector_profile.py`'s `build_env`: the tree's
Hydra config, `build_offpolicy_env_cfg_override`, the registry env factory). The adapter only converts: its
outputs are torch tensors on the CPU, done rows' final observations come from the env's
`final_observation` exactly where the host collector's `resolve_terminal_observation_contract` takes them,
and every output and every action it was given can be recorded for a comparison.

Imported in subprocesses whose `PYTHONPATH` has the overlay, the applied tree's `src`, `experiments/` and
`tests/`; run from the applied tree's root (its scene paths are root-relative).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flashsac_runtime.collector.device_env import DeviceStep
from uni_rl.utils.observations import split_obs_dict

#: Set by a test to a step index: the first done row from that step on returns a NaN in its final observation
#: (a NaN batch for the finite guard; the env itself and the policy's observations stay finite).
NAN_STEP_VARIABLE = "DEVICE_ENV_ADAPTER_NAN_STEP"


class NumpyEnvAsDeviceEnv:
    """A `DeviceVecEnv` over a UniLab NumPy env; `recording` keeps (actions, outputs) when asked."""

    def __init__(self, env: Any, device: torch.device, *, record: bool = False, nan_step: int = -1) -> None:
        self._env = env
        self.num_envs = int(env.num_envs)
        self.device = torch.device(device)
        spec = dict(env.obs_groups_spec)
        self.policy_obs_dim = int(spec["obs"])
        self.critic_obs_dim = int(spec.get("critic", spec["obs"]))
        self.action_dim = int(env.action_space.shape[0])
        self.recording: list[tuple[torch.Tensor | None, DeviceStep]] | None = [] if record else None
        self._nan_step = nan_step
        self._steps = 0
        #: The env's own state of the last reset or step (what the host collector reads).
        self.last_state: Any = None

    def _to_step(self, state: Any, *, first: bool) -> DeviceStep:
        self.last_state = state
        obs, critic = (np.asarray(x, dtype=np.float32) for x in split_obs_dict(state.obs))
        n = self.num_envs
        if first:
            reward = np.zeros(n, np.float32)
            terminated = truncated = np.zeros(n, bool)
        else:
            reward = np.asarray(state.reward, dtype=np.float32).ravel()
            terminated = np.asarray(state.terminated, dtype=bool).ravel()
            truncated = np.asarray(state.truncated, dtype=bool).ravel()
        done = (terminated | truncated)[:, None]
        final = state.final_observation if isinstance(state.final_observation, dict) and done.any() else {}
        final_obs = np.where(done, np.asarray(final.get("obs", obs), dtype=np.float32), obs)
        final_critic = np.where(done, np.asarray(final.get("critic", critic), dtype=np.float32), critic)
        if 0 <= self._nan_step <= self._steps and done.any():
            final_obs[int(np.flatnonzero(done[:, 0])[0]), 0] = np.nan
            self._nan_step = -1
        t = lambda a: torch.from_numpy(np.array(a, copy=True)).to(self.device)  # noqa: E731
        return DeviceStep(t(obs), t(critic), t(reward), t(terminated), t(truncated), t(final_obs), t(final_critic))

    def reset(self) -> DeviceStep:
        self._env.init_state()
        step = self._to_step(self._env.state, first=True)
        self._record(None, step)
        return step

    def step(self, actions: torch.Tensor) -> DeviceStep:
        state = self._env.step(actions.detach().to("cpu", torch.float32).numpy())
        self._steps += 1
        step = self._to_step(state, first=False)
        self._record(actions, step)
        return step

    def _record(self, actions: torch.Tensor | None, step: DeviceStep) -> None:
        if self.recording is not None:
            self.recording.append(
                (None if actions is None else actions.detach().clone(), DeviceStep(*(x.clone() for x in step)))
            )

    def close(self) -> None:
        self._env.close()


def _compose_flashsac_cfg(overrides: list[str]) -> Any:
    """The tree's FlashSAC config; inside a running Hydra app (the training CLI) through its own search path."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name="config", overrides=overrides)
    with initialize_config_dir(config_dir=str(Path("src/unilab/conf/flashsac").resolve()), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def make_g1_walk_flat_cpu_env(num_envs: int, device: torch.device, seed: int, *,
                              env_cfg_override: dict[str, Any] | None = None) -> NumpyEnvAsDeviceEnv:
    """The `(num_envs, device, seed, env_cfg_override=)` factory `training.device_env_factory` names in the CLI
    test; UniLab's build_runner passes the run's own env override (composed here when called without one)."""
    from unilab.base.env_factory import make_registry_env
    from unilab.scripts.train_offpolicy import build_offpolicy_env_cfg_override

    cfg = _compose_flashsac_cfg(["task=g1_walk_flat/mujoco", f"algo.num_envs={num_envs}", f"algo.seed={seed}"])
    override = env_cfg_override if env_cfg_override is not None else build_offpolicy_env_cfg_override("flashsac", cfg)
    np.random.seed(seed)  # the collector's apply_training_seed: init_state draws episode offsets from it
    env = make_registry_env(str(cfg.training.task_name), str(cfg.training.sim_backend), num_envs,
                            {**(override or {}), "seed": seed})
    return NumpyEnvAsDeviceEnv(env, device, nan_step=int(os.environ.get(NAN_STEP_VARIABLE, "-1")))
