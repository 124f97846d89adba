#!/usr/bin/env python3
"""Are ``MassConstants.recompute()``'s model rows bitwise ``mujoco_warp.set_const``'s, with the env's Data untouched?

The model: Go2's scene (``scene_flat.xml`` of UniLab's tree: Go2 and a floor, a directional light), with a camera on
the base tracking its subtree COM, a light on the base targeting the base's subtree COM, and four of the twelve
position actuators given a damping ratio (``actuator_biasprm[2] > 0`` with ``gainprm[0] == -biasprm[1]``, resolved by
the first ``set_const``), so that every quantity ``set_const`` derives from mass and centre of mass is exercised.
Its per-world fields expanded to ``--worlds`` worlds as the mjwarp backend expands them (``expand_model_fields``).

Model A gets ``mujoco_warp.set_const(A, its Data)``, models B and C the same rows and ``MassConstants.recompute()``
(each its own; C's replayed from a CUDA graph with ``--capture``): two rounds, each with new ``body_mass``/
``body_ipos`` rows drawn differently per world. Every recomputed quantity (``QUANTITIES``) must be bitwise equal
(``np.array_equal``) in both rounds, the damping ratios resolved, and B's own Data (given a state of its own first)
unchanged by ``recompute()``.
Controls that must differ: one world's mass changed in B only (the per-world quantities differ in that world
alone), world 0's centre of mass changed in B only (``stat.meaninertia`` follows world 0, the subtree masses do
not change). Refused in one line: a model with a tendon, with a mocap body, with a site transmission, with a
sparse LDL region in its inertia's factor.

Also counts ``wp.launch``/``wp.launch_tiled`` calls of ``set_const`` and of ``recompute()`` on Go2's plain scene
(monkeypatched). ``--capture`` (CUDA): C's ``recompute()`` is recorded inside a conditional node of a CUDA graph
(``wp.capture_if``) and replayed instead of called; ``--time`` (CUDA) adds the mean milliseconds of ``set_const``
and of the replayed graph. Exit 0 iff every check passes; prints one JSON line.

Run by ``tests/test_mass_constants.py`` on Warp's CPU device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import mujoco
import numpy as np

#: The model quantities ``MassConstants`` recomputes (``stat.meaninertia`` as ``meaninertia``).
QUANTITIES = ("body_subtreemass", "meaninertia", "dof_invweight0", "body_invweight0", "cam_pos0", "cam_poscom0",
              "cam_mat0", "light_pos0", "light_poscom0", "light_dir0", "actuator_acc0", "actuator_biasprm")
#: The damped actuators (``biasprm[2]`` a damping ratio until the first ``set_const``).
DAMPED = (0, 4, 8, 11)

REFUSED = {
    "tendon": """<mujoco><worldbody><body><joint name="a" type="hinge"/><geom size=".1"/>
                 <body><joint name="b" type="hinge"/><geom size=".1"/></body></body></worldbody>
                 <tendon><fixed name="t"><joint joint="a" coef="1"/><joint joint="b" coef="-1"/></fixed></tendon>
                 </mujoco>""",
    "mocap": """<mujoco><worldbody><body mocap="true"><geom size=".1" contype="0" conaffinity="0"/></body>
                <body><freejoint/><geom size=".1"/></body></worldbody></mujoco>""",
    "site transmission": """<mujoco><worldbody><body><freejoint/><geom size=".1"/><site name="s"/></body></worldbody>
                            <actuator><general site="s" gear="1 0 0 0 0 0"/></actuator></mujoco>""",
    # A chain of 80 hinges: MuJoCo Warp factors an inertia block that large as a sparse LDL region.
    "sparse inertia": "<mujoco><worldbody>" + '<body pos="0 0 .1"><joint type="hinge"/><geom size=".02"/>' * 80
                      + "</body>" * 80 + "</worldbody></mujoco>",
}


def go2_model(scene: str, extras: bool) -> mujoco.MjModel:
    """Go2's scene; with ``extras`` the tracking camera, the targeting light and the damping ratios."""
    spec = mujoco.MjSpec.from_file(scene)
    if extras:
        base = spec.body("base")
        base.add_camera(name="track_com", mode=mujoco.mjtCamLight.mjCAMLIGHT_TRACKCOM, pos=[0.0, -1.5, 0.6])
        base.add_light(name="target_com", mode=mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODYCOM, targetbody="base",
                       pos=[0.5, 0.5, 1.0])
    model = spec.compile()
    if extras:
        for actuator in DAMPED:
            model.actuator_biasprm[actuator, 2] = 0.7  # a damping ratio: set_const turns it into -damping
    return model


def counted_launches(wp: Any) -> tuple[dict[str, int], Callable[[], None]]:
    """``wp.launch``/``wp.launch_tiled`` counting their calls into the returned dict; the callable restores them."""
    counts = {"launch": 0, "launch_tiled": 0}
    originals = {name: getattr(wp, name) for name in counts}

    def counting(name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            counts[name] += 1
            return originals[name](*args, **kwargs)
        return call

    for name in counts:
        setattr(wp, name, counting(name))
    return counts, lambda: [setattr(wp, name, original) for name, original in originals.items()]


def quantity(model: Any, name: str) -> np.ndarray:
    return (model.stat.meaninertia if name == "meaninertia" else getattr(model, name)).numpy()


def differing(a: Any, b: Any) -> dict[str, list[int]]:
    """The quantities whose rows differ between models ``a`` and ``b``, each with the world rows that differ."""
    out = {}
    for name in QUANTITIES:
        x, y = quantity(a, name), quantity(b, name)
        if x.shape != y.shape or not np.array_equal(x, y):
            rows = (x != y).reshape(x.shape[0], -1).any(axis=1) if x.shape == y.shape else np.ones(1, bool)
            out[name] = np.flatnonzero(rows).tolist()
    return out


def data_arrays(wp: Any, data: Any, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Every Warp array of a MuJoCo Warp ``Data`` (its nested dataclasses too), as host copies by name."""
    for field in dataclasses.fields(data):
        value = getattr(data, field.name)
        if isinstance(value, wp.array):
            yield prefix + field.name, value.numpy().copy()
        elif dataclasses.is_dataclass(value):
            yield from data_arrays(wp, value, f"{prefix}{field.name}.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scene", required=True, help="Go2's scene_flat.xml (its meshes beside it)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--worlds", type=int, default=4)
    p.add_argument("--capture", action="store_true", help="CUDA: replay C's recompute() from a conditional node")
    p.add_argument("--time", action="store_true", help="CUDA: mean ms of set_const and of the replayed graph")
    args = p.parse_args(argv)

    import mujoco_warp as mjw
    import warp as wp

    from flashsac_runtime.mjwarp.mass_constants import MassConstants
    from unisim.backend.mjwarp.randomization import expand_model_fields

    wp.config.log_level = wp.LOG_WARNING  # no init banner or module loads on stdout: the JSON line is the output
    n = args.worlds
    result: dict[str, Any] = {"device": args.device, "worlds": n, "captured": args.capture}
    with wp.ScopedDevice(args.device):
        # Launch counts on Go2's plain scene.
        plain = go2_model(args.scene, extras=False)
        model, data = mjw.put_model(plain), mjw.make_data(plain, nworld=n)
        expand_model_fields(wp, model, n)
        constants = MassConstants(plain, model, n)
        launches = {}
        for name, call in (("set_const", lambda: mjw.set_const(model, data)), ("recompute", constants.recompute)):
            call()  # modules loaded
            counts, restore = counted_launches(wp)
            call()
            restore()
            launches[name] = {**counts, "total": sum(counts.values())}
        result["launches"] = launches

        mjm = go2_model(args.scene, extras=True)
        models, datas = [], []
        for _ in range(3):
            m, d = mjw.put_model(mjm), mjw.make_data(mjm, nworld=n)
            expand_model_fields(wp, m, n)
            models.append(m)
            datas.append(d)
        a, b, c = models
        recompute_b = MassConstants(mjm, b, n).recompute
        constants_c = MassConstants(mjm, c, n)
        recompute_c = constants_c.recompute
        if args.capture:
            condition = wp.ones(1, dtype=wp.int32)
            # Modules loaded before the capture, on a model of its own: a recompute resolves the damping ratios in
            # place, once, so a call on C before the rounds would leave its actuator_biasprm a round behind A's.
            warm = mjw.put_model(mjm)
            expand_model_fields(wp, warm, n)
            MassConstants(mjm, warm, n).recompute()
            with wp.ScopedCapture() as capture:
                wp.capture_if(condition, on_true=constants_c.recompute)
            graph = capture.graph
            recompute_c = lambda: wp.capture_launch(graph)  # noqa: E731

        # B's own Data gets a state of its own (not qpos0) and its derived arrays.
        rng = np.random.default_rng(7)
        qpos = np.tile(mjm.qpos0, (n, 1)) + rng.uniform(-0.2, 0.2, (n, mjm.nq))
        datas[1].qpos.assign(qpos.astype(np.float32))
        datas[1].qvel.assign(rng.uniform(-1.0, 1.0, (n, mjm.nv)).astype(np.float32))
        mjw.forward(b, datas[1])
        before = dict(data_arrays(wp, datas[1]))

        rounds = []
        for _ in range(2):
            mass = (mjm.body_mass[None] * rng.uniform(0.7, 1.3, (n, mjm.nbody))).astype(np.float32)
            ipos = (mjm.body_ipos[None] + rng.uniform(-0.05, 0.05, (n, mjm.nbody, 3))).astype(np.float32)
            for m in models:
                m.body_mass.assign(mass)
                m.body_ipos.assign(ipos)
            mjw.set_const(a, datas[0])
            recompute_b()
            recompute_c()
            wp.synchronize_device()
            rounds.append({"B": differing(a, b), "C": differing(a, c)})
        result["rounds"] = rounds
        result["dampratio_resolved"] = bool((quantity(b, "actuator_biasprm")[:, DAMPED, 2] < 0).all())
        after = dict(data_arrays(wp, datas[1]))
        result["data_changed"] = sorted(k for k in before if not np.array_equal(before[k], after[k]))
        result["data_arrays_compared"] = len(before)

        controls = {}
        mass = b.body_mass.numpy()
        mass[1, 5] += 0.01  # world 1's thigh, in B only
        b.body_mass.assign(mass)
        recompute_b()
        controls["mass (world 1)"] = differing(a, b)
        b.body_mass.assign(a.body_mass.numpy())
        ipos = b.body_ipos.numpy()
        ipos[0, 1, 0] += 0.001  # world 0's base, in B only
        b.body_ipos.assign(ipos)
        recompute_b()
        controls["CoM (world 0)"] = differing(a, b)
        result["controls"] = controls

        refused = {}
        for name, xml in REFUSED.items():
            small = mujoco.MjModel.from_xml_string(xml)
            try:
                MassConstants(small, mjw.put_model(small), 2)
                refused[name] = None
            except ValueError as exc:
                refused[name] = str(exc)
        result["refused"] = refused

        if args.time and wp.get_device().is_cuda:
            def mean_ms(call: Callable[[], None], repeats: int = 50) -> float:
                call()
                wp.synchronize_device()
                start = time.perf_counter()
                for _ in range(repeats):
                    call()
                wp.synchronize_device()
                return (time.perf_counter() - start) * 1000.0 / repeats
            result["ms"] = {"set_const": mean_ms(lambda: mjw.set_const(a, datas[0])), "recompute": mean_ms(recompute_c)}

    equal = all(not diff for r in rounds for diff in r.values())
    result["equal"] = equal
    result["ok"] = bool(equal and result["dampratio_resolved"] and not result["data_changed"]
                        and all(refused.values()) and all(controls.values()))
    print(json.dumps(result))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
