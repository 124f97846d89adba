"""The deliberate breakages of the device env checks' negative controls: each must make its check fail."""

from __future__ import annotations

from typing import Any


def perturb_reward(env: Any, term: str) -> None:
    """Negative control: one reward term of the device env scaled by 1.001."""
    names = [r.name for r in env._rewards]  # noqa: SLF001 - the env's bound reward terms
    if term not in names:
        raise SystemExit(f"device_env_check: no reward term {term!r} (terms: {names})")
    index = names.index(term)
    bound = env._rewards[index]  # noqa: SLF001
    twin = bound.twin
    env._rewards[index] = type(bound)(bound.name, lambda s, **p: twin(s, **p) * 1.001, bound.params,  # noqa: SLF001
                                      bound.weight, bound.curriculum_scaled)


def misplace_physics_stamp(dev: Any) -> None:
    """The step-split checks' control: the env's physics stamp taken before the physics, not after it."""
    stamps = dev.step_stamps
    after, physics = stamps.after, type(dev.sim).step
    stamps.after = lambda part: None if part == "env_physics" else after(part)

    def stamped_first(sim: Any, *a: Any, **k: Any) -> Any:
        after("env_physics")
        return physics(sim, *a, **k)

    type(dev.sim).step = stamped_first


def rebind_motion_state() -> None:
    """Motion tracking's command state stored by binding new tensors each step, not into the tensors held
    (``terms.motion_tracking._store`` undone): the step's CUDA graph then reads the storage of its capture, stale.
    A negative control: call it before the env is built."""
    from flashsac_runtime.envs.terms import motion_tracking

    motion_tracking._store = lambda held, key, value: held.__setitem__(key, value)  # noqa: SLF001
