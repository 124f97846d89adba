"""Zero-copy torch views of the MJWarp arrays the device env reads and writes, and the physics calls on them.

The arrays belong to the unisim ``MjwarpBackend`` of a UniLab env built the usual way (same model, solver
options, substeps, contact capacities and per-world model fields), so the device env steps exactly the model
the host path steps, with the MuJoCo Warp calls the backend makes (``step``, ``reset_data`` over the reset
mask, the kinematics and sensor kernels of a forward). ``wp.to_torch`` views share memory with Warp; they are
made once and never rebound, so addresses stay stable for graph capture. ``capture`` records a whole env step,
torch and Warp work alike, as one CUDA graph on the env's stream. Nothing here copies through the host.

The env's stream: Warp creates its streams blocking (``CU_STREAM_DEFAULT``), and a blocking stream synchronizes
implicitly with the legacy default stream, on which torch runs the learner. With the env on Warp's own stream,
the env step of the last tick (launched beside the learner by the device collector) and the learner's graph therefore ran
one after the other on the device: measured on an H200, the learner's phase was the env step's time plus its
own. ``own_stream`` (the default) gives Warp a non-blocking torch stream for the device instead; every order the
env needs is an explicit stream wait (``G1WalkDeviceEnv._on_sim_stream``), so only the implicit one goes.

A captured step's torch temporaries live in a memory pool of the env's own (``capture``).

Sensors in the last substep only: MuJoCo Warp's ``step`` computes every sensor in each substep (position,
velocity and acceleration stages; the G1's accelerometers add the post-constraint RNE): 29 of the about 220
kernel launches of a G1 Walk Flat substep. Sensors are outputs: no later stage of a physics step reads them, and
each substep's forward zeroes ``sensordata`` before it computes them again. So only the last substep's sensors
are ever read, and the substeps before it skip them (MuJoCo's own sensor disable flag, on a shallow copy of the
model that shares all its arrays). A step leaves every MuJoCo Warp array bitwise the same (the overlay's
``device_env_check.py --mode sensors``); the physics is launch-bound at the report's 256 worlds. Not done where
sensors keep state across substeps: delay/interval history buffers, or energy sensors.

Without the acceleration stage (``acceleration_sensors=False``): G1 Walk Flat reads position and velocity sensors
only (frame positions, orientations and axes, gyro, velocimeter); its accelerometers and foot contact sensors are
computed and never read. The acceleration stage is 25 of the last substep's kernel launches (the contact sensors'
matching, and the post-constraint RNE the accelerometers need). The last substep then runs MuJoCo Warp's own
``step`` stage by stage with that stage left out (``_step_without_acceleration_sensors``: the position and
velocity sensors where ``forward`` computes them, before the integration), and reading an acceleration-stage
sensor is a one-line error (``SensorSlots``). Only the acceleration stage's outputs differ: those sensors' slots,
and the post-constraint RNE's ``cacc``, ``cfrc_int`` and ``cfrc_ext``, which no later stage reads before the next
substep computes them again (``device_env_check.py --mode sensor-stages``). Not done where the step would need
more than that order of calls: sleeping islands, energy, a control callback, sensor history, the RK4 integrator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from collections.abc import Callable
from typing import Any

import torch
from flashsac_runtime import cuda_capture


class MjwarpState:
    """Torch views of one ``MjwarpBackend``'s device model and data."""

    def __init__(self, backend: Any, *, own_stream: bool = True, sensors_every_substep: bool = False,
                 acceleration_sensors: bool = True) -> None:
        import warp as wp

        if type(backend).__name__ != "MjwarpBackend":
            raise TypeError(f"the device env needs the mjwarp backend, got {type(backend).__name__}")
        self._wp = wp
        data, model = backend._device_data, backend._device_model  # noqa: SLF001 - the adapter's own arrays
        self._mjw, self._model, self._data = backend._mujoco_warp, model, data  # noqa: SLF001
        self._inner_substep_model = model if sensors_every_substep else self._without_sensors(self._mjw, model)
        self.qpos = wp.to_torch(data.qpos)
        self.qvel = wp.to_torch(data.qvel)
        self.ctrl = wp.to_torch(data.ctrl)
        self.sensordata = wp.to_torch(data.sensordata)
        self.gainprm = wp.to_torch(model.actuator_gainprm)
        self.biasprm = wp.to_torch(model.actuator_biasprm)
        self._reset_mask_wp = wp.zeros(self.qpos.shape[0], dtype=bool, device=data.qpos.device)
        self._reset_mask = wp.to_torch(self._reset_mask_wp)
        self._any_row_wp = wp.zeros(1, dtype=wp.int32, device=data.qpos.device)  # ``when_any``'s condition
        self._any_row = wp.to_torch(self._any_row_wp)
        if self.gainprm.shape[0] != self.qpos.shape[0] or self.biasprm.shape[0] != self.qpos.shape[0]:
            raise ValueError("the mjwarp model's actuator gains are not per-world; pd_gains cannot be applied")
        self._acceleration_sensors = acceleration_sensors or sensors_every_substep or not self._stagewise(model)
        self.sensor_slots = SensorSlots(backend._sensor_slots, backend._cpu_model,  # noqa: SLF001
                                        computed=self._acceleration_sensors)
        self.device = self.qpos.device
        self.stream = self._own_stream(wp) if own_stream else self._warp_stream(wp)
        # What runs, for the env's ``describe``: the stream, and where the sensors are computed (every substep also
        # where they carry state across substeps, ``_without_sensors``).
        self.stream_kind = "none" if self.stream is None else ("own" if own_stream else "warp")
        self.sensors_in = ("every_substep" if self._inner_substep_model is model else
                           "last_substep" if self._acceleration_sensors else "position_velocity")
        self._warp_captures: list[Any] = []  # Warp's handles of the captures (see ``capture``)
        self._capture_pools: list[Any] = []  # the memory of the captures' resumed parts (see ``capture``)

    @staticmethod
    def _without_sensors(mjw: Any, model: Any) -> Any:
        """``model`` with MuJoCo's sensor stage disabled (its arrays shared), or ``model`` itself where a
        substep's sensors carry state into the next one (history buffers, energy)."""
        if int(model.nhistory) > 0 or int(model.opt.enableflags) & int(mjw.EnableBit.ENERGY):
            return model
        flags = int(model.opt.disableflags) | int(mjw.DisableBit.SENSOR)
        return dataclasses.replace(model, opt=dataclasses.replace(model.opt, disableflags=flags))

    def _stagewise(self, model: Any) -> bool:
        """Whether ``_step_without_acceleration_sensors`` is MuJoCo Warp's ``step`` for ``model`` (module docstring)."""
        mjw, opt = self._mjw, model.opt
        return (not int(opt.enableflags) & (int(mjw.EnableBit.SLEEP) | int(mjw.EnableBit.ENERGY))
                and int(model.nhistory) == 0 and model.callback.control is None
                and opt.integrator in (mjw.IntegratorType.EULER, mjw.IntegratorType.IMPLICITFAST,
                                       mjw.IntegratorType.IMPLICIT))

    def _step_without_acceleration_sensors(self) -> None:
        """MuJoCo Warp's ``step`` (``forward``, then the integrator) for a model ``_stagewise`` admits, call for
        call, but for the acceleration stage's sensors after the constraint solve."""
        mjw, m, d = self._mjw, self._model, self._data
        mjw.fwd_position(m, d, factorize=False)
        d.sensordata.zero_()
        mjw.sensor_pos(m, d)
        d.energy.zero_()
        mjw.fwd_velocity(m, d)
        mjw.sensor_vel(m, d)
        mjw.fwd_actuation(m, d)
        mjw.fwd_acceleration(m, d, factorize=True)
        mjw.solve(m, d)
        if m.opt.integrator == mjw.IntegratorType.EULER:
            mjw.euler(m, d)
        else:
            mjw.implicit(m, d)

    def _warp_stream(self, wp: Any) -> torch.cuda.ExternalStream | None:
        """Warp's stream as a torch stream: torch writes into the views are ordered with the Warp launches
        (``own_stream=False``: blocking, so ordered with torch's default stream too)."""
        if self.device.type != "cuda":
            return None
        return torch.cuda.ExternalStream(wp.get_stream(str(self.device)).cuda_stream, device=self.device)

    def _own_stream(self, wp: Any) -> torch.cuda.Stream | None:
        """A non-blocking torch stream, made Warp's current stream of the device: the env's work never waits
        implicitly for torch's default stream, nor torch's default stream for it.

        The backend's set-up work on Warp's previous stream is finished first. The torch stream outlives the env
        (Warp's wrapper holds it); the Warp arrays the env uses are the backend's, alive as long as the env.
        """
        if self.device.type != "cuda":
            return None
        wp.synchronize_device(str(self.device))
        stream = torch.cuda.Stream(self.device)
        wp.set_stream(wp.stream_from_torch(stream), device=str(self.device))
        return stream

    def capture(self, body: Callable[[], None], generators: tuple[torch.Generator, ...], *,
                stream: torch.cuda.Stream | None = None, warp: bool = True) -> torch.cuda.CUDAGraph:
        """One CUDA graph of ``body`` (torch ops and MuJoCo Warp launches) on the env's stream (or ``stream``,
        with ``warp=False`` for torch work alone).

        torch owns the capture (its private memory pool keeps the graph's temporaries alive); Warp is told the
        capture is external so its launches and allocations are recorded, not run. ``body`` must have run once
        eagerly (kernel loads, lazy allocations) and must not sync with the host. Python's garbage collector
        is held off during the capture: a Warp graph finalized inside it destroys a graph mid-capture, which
        invalidates the capture. Warp's handle of this capture is kept with the graph, so it is never finalized
        while another capture runs.

        The graph's memory: torch gives a capture's allocations its private pool while the stream's capture is
        the one torch began (it compares capture ids). MuJoCo Warp's solver loop and collision dispatch are
        conditional graph nodes, at which Warp ends the capture and resumes it; had the id changed there, every
        later torch allocation would have come from torch's shared pool and gone back to it at the capture's
        end, while the graph kept using it. As a precaution this thread's allocations of a capture with Warp work
        go to a pool of the env's own (``torch.cuda.use_mem_pool``), held as long as the env. On an H200 with
        torch 2.11 no temporary was found in the shared pool with or without it. A capture that fails is closed
        (``flashsac_runtime.cuda_capture``): torch's allocator no longer counts it, and the stream current
        before it is current again.
        """
        assert self.stream is not None
        stream = self.stream if stream is None else stream
        pool = torch.cuda.MemPool() if warp else None
        graph = torch.cuda.CUDAGraph()
        for generator in generators:
            graph.register_generator_state(generator)
        warp_stream = self._wp.get_stream(str(self.device))
        # torch registers its default CUDA generator with every capture, and a failed capture leaves that state
        # unusable: the capture gets a copy of the state (the body never draws from it), the original returns.
        default = torch.cuda.default_generators[self.device.index or 0]
        saved = default.graphsafe_get_state()
        default.graphsafe_set_state(default.clone_state())
        collecting = gc.isenabled()
        gc.disable()
        try:
            with (cuda_capture.capture(graph, stream=stream, capture_error_mode="thread_local"),
                  torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()):
                if warp:
                    self._wp.capture_begin(stream=warp_stream, external=True,
                                           capture_mode=self._wp.CaptureMode.THREAD_LOCAL)
                try:
                    body()
                finally:
                    if warp:
                        self._warp_captures.append(self._wp.capture_end(stream=warp_stream))
        finally:
            if collecting:
                gc.enable()
            default.graphsafe_set_state(saved)
        if pool is not None:
            self._capture_pools.append(pool)
        return graph

    def sensor(self, name: str) -> torch.Tensor:
        start, dim = self.sensor_slots[name]
        return self.sensordata[:, start:start + dim]

    def step(self, substeps: int) -> None:
        """``substeps`` MJWarp steps with the current ``ctrl``; the sensors only in the last, there without the
        acceleration stage unless ``acceleration_sensors`` (module docstring)."""
        for index in range(substeps - 1):
            self._mjw.step(self._inner_substep_model, self._data)
        if self._acceleration_sensors:
            self._mjw.step(self._model, self._data)
        else:
            self._step_without_acceleration_sensors()

    def when_any(self, rows: torch.Tensor, body: Callable[[], None]) -> None:
        """``body`` only where a row of ``rows`` is set, decided on the device: ``body`` must change nothing that
        is read later when no row is set (the env's reset of no rows).

        The condition is a flag written on the device, read by Warp's ``capture_if``: inside a CUDA graph capture
        (the env step's graph) a conditional graph node, so no host read; on the CPU a direct read of the flag
        (free there). On CUDA outside a capture (the step's eager run before its capture, a failed capture's eager
        step) ``body`` always runs: deciding there would wait for the GPU.
        """
        if self.device.type == "cuda" and not torch.cuda.is_current_stream_capturing():
            body()
            return
        self._any_row.copy_(rows.any())
        self._wp.capture_if(self._any_row_wp, on_true=body)

    def reset_rows(self, rows: torch.Tensor) -> None:
        """MJWarp's ``reset_data`` for the masked worlds (clears their state, warm start, time, forces)."""
        self._reset_mask.copy_(rows)
        self._mjw.reset_data(self._model, self._data, reset=self._reset_mask_wp)

    def forward_rows(self, rows: torch.Tensor) -> None:
        """The masked worlds' position and velocity sensors for their reset state, as the host reset reads them.

        UniLab's reset runs a forward over the reset rows and reads their sensors. The env reads position and
        velocity sensors only (frame positions, orientations and axes, gyro, velocimeter), which MuJoCo Warp
        computes from the kinematics and COM velocities of qpos/qvel alone: those kernels run here, not the
        collision and constraint solve of a full forward. They run over every world; only the masked worlds
        keep the new sensors, the others keep those of their last step (which the env reads). Nothing
        integrated changes (qpos, qvel, act, time, warm start), so every world's next step is unchanged.
        """
        kept = self.sensordata.clone()
        mjw, model, data = self._mjw, self._model, self._data
        mjw.kinematics(model, data)
        mjw.com_pos(model, data)
        mjw.com_vel(model, data)
        mjw.sensor_pos(model, data)
        mjw.sensor_vel(model, data)
        torch.where(rows[:, None], self.sensordata, kept, out=self.sensordata)



class SensorSlots(dict):
    """The sensors' ``sensordata`` slots by name, ``(start, dim)``. Where the acceleration stage is not computed
    (``computed=False``), looking up one of its sensors is a one-line error: its slot holds no value."""

    def __init__(self, slots: dict[str, tuple[int, int]], mj_model: Any, *, computed: bool) -> None:
        import mujoco

        super().__init__(slots)
        self.uncomputed = frozenset() if computed else frozenset(
            name for name in slots
            if (index := mujoco.mj_name2id(mj_model, mujoco.mjtObj.mjOBJ_SENSOR, name)) >= 0
            and int(mj_model.sensor_needstage[index]) >= int(mujoco.mjtStage.mjSTAGE_ACC))

    def __getitem__(self, name: str) -> tuple[int, int]:
        if name in self.uncomputed:
            raise ValueError(f"the device env reads {name}, an acceleration-stage sensor, which it does not "
                             "compute (only the position and velocity stages'); its factory must pass "
                             "acceleration_sensors=True")
        return super().__getitem__(name)
