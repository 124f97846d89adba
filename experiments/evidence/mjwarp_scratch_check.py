#!/usr/bin/env python3
"""Does the row-wise reset's scratch forward read each reset row's own per-world model values?

unisim 0003 runs the reset-time forward of ``k`` reset rows in a scratch ``Data`` of ``capacity`` worlds
over a scratch ``Model`` whose per-world fields are gathered from the main model at the reset rows. This check
builds a small actuated MJCF (three hinge joints under position actuators, a free base resting on a plane: the
forward runs contacts and the constraint solver) on Warp's device, expands its per-world fields across
``NUM_WORLDS`` worlds with distinct actuator gains, masses and frictions per world, runs a forward over every
world in the main ``Data``, and the same rows' forward in the scratch. ``qacc``, ``actuator_force`` and
``sensordata`` of each reset row must equal the main ``Data``'s rows bitwise (same kernels, same inputs).
``--no-gather`` skips the gather (scratch world ``i`` reads its zero-initialised fields), ``--main-model``
runs the scratch over the main model as unisim-core 1.7.8 did (scratch world ``i`` reads main world ``i``):
both must be reported as differing. Exit 0 iff equal; prints one JSON line.

Run by ``tests/test_mjwarp_row_reset.py`` on Warp's CPU device, and on CUDA for the committed evidence.
"""

from __future__ import annotations

import argparse
import json
import sys

import mujoco
import numpy as np

NUM_WORLDS = 32
CAPACITY = 8
ROWS = np.array([29, 3, 17, 11, 30], dtype=np.int32)

MJCF = """
<mujoco>
  <option timestep="0.005"/>
  <worldbody>
    <geom type="plane" size="5 5 0.1"/>
    <body name="base" pos="0 0 0.3">
      <freejoint/>
      <geom type="box" size="0.2 0.1 0.05" mass="2"/>
      <site name="imu"/>
      <body pos="0.2 0 0">
        <joint name="j1" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.03" mass="0.4"/>
        <body pos="0 0 -0.25">
          <joint name="j2" type="hinge" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0 0 -0.25" size="0.03" mass="0.3"/>
        </body>
      </body>
      <body pos="-0.2 0 0">
        <joint name="j3" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0 0 -0.3" size="0.03" mass="0.4"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <position name="a1" joint="j1" kp="40" kv="1"/>
    <position joint="j2" kp="30" kv="1"/>
    <position joint="j3" kp="40" kv="1"/>
  </actuator>
  <sensor>
    <accelerometer site="imu"/>
    <actuatorfrc actuator="a1"/>
    <jointactuatorfrc joint="j3"/>
  </sensor>
</mujoco>
"""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-gather", action="store_true", help="negative control: skip the gather")
    p.add_argument("--main-model", action="store_true", help="negative control: scratch over the main model")
    args = p.parse_args(argv)

    import mujoco_warp
    import warp as wp

    from unisim.backend.mjwarp.randomization import expand_model_fields
    from flashsac_runtime.mjwarp.row_commit import ScratchModel

    cpu_model = mujoco.MjModel.from_xml_string(MJCF)
    model = mujoco_warp.put_model(cpu_model)
    expand_model_fields(wp, model, NUM_WORLDS)
    rng = np.random.default_rng(3)
    gain = model.actuator_gainprm.numpy()
    bias = model.actuator_biasprm.numpy()
    kp = rng.uniform(10.0, 80.0, size=(NUM_WORLDS, cpu_model.nu)).astype(np.float32)
    gain[:, :, 0], bias[:, :, 1] = kp, -kp
    bias[:, :, 2] = -rng.uniform(0.5, 3.0, size=(NUM_WORLDS, cpu_model.nu)).astype(np.float32)
    model.actuator_gainprm.assign(gain)
    model.actuator_biasprm.assign(bias)
    mass = model.body_mass.numpy()
    mass[:, 1] *= rng.uniform(0.8, 1.2, size=NUM_WORLDS).astype(np.float32)
    model.body_mass.assign(mass)
    friction = model.geom_friction.numpy()
    friction[:, 0, 0] = rng.uniform(0.3, 1.2, size=NUM_WORLDS).astype(np.float32)
    model.geom_friction.assign(friction)
    mujoco_warp.set_const(model, mujoco_warp.make_data(cpu_model, nworld=NUM_WORLDS))

    qpos = np.broadcast_to(cpu_model.qpos0, (NUM_WORLDS, cpu_model.nq)).astype(np.float32).copy()
    qpos[:, 2] = rng.uniform(0.25, 0.32, size=NUM_WORLDS)  # some worlds in contact with the plane
    qpos[:, 7:] = rng.uniform(-0.8, 0.8, size=(NUM_WORLDS, cpu_model.nq - 7))
    qvel = rng.uniform(-1.0, 1.0, size=(NUM_WORLDS, cpu_model.nv)).astype(np.float32)
    ctrl = rng.uniform(-0.5, 0.5, size=(NUM_WORLDS, cpu_model.nu)).astype(np.float32)

    main_data = mujoco_warp.make_data(cpu_model, nworld=NUM_WORLDS, nconmax=256, njmax=512)
    for name, values in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
        getattr(main_data, name).assign(values)
    mujoco_warp.forward(model, main_data)

    scratch = ScratchModel(model, NUM_WORLDS, CAPACITY)
    scratch.set_rows(ROWS)
    if not args.no_gather:
        scratch.gather()
    data = mujoco_warp.make_data(cpu_model, nworld=CAPACITY, nconmax=32, njmax=64)
    for name, values in (("qpos", qpos), ("qvel", qvel), ("ctrl", ctrl)):
        block = np.zeros((CAPACITY, values.shape[1]), dtype=np.float32)
        block[: len(ROWS)] = values[ROWS]
        getattr(data, name).assign(block)
    mujoco_warp.forward(model if args.main_model else scratch.model, data)
    wp.synchronize()

    differing = {}
    for name in ("qacc", "actuator_force", "sensordata"):
        main_rows = getattr(main_data, name).numpy()[ROWS]
        scratch_rows = getattr(data, name).numpy()[: len(ROWS)]
        if main_rows.tobytes() != scratch_rows.tobytes():
            differing[name] = float(np.max(np.abs(main_rows - scratch_rows)))
    ncon = int(main_data.nacon.numpy()[0])
    print(json.dumps({"equal": not differing, "differing_max_abs": differing, "main_contacts": ncon,
                      "rows": ROWS.tolist(), "device": str(wp.get_device())}))
    return 0 if not differing else 1


if __name__ == "__main__":
    sys.exit(main())
