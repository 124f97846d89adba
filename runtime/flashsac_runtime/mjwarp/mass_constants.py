"""The model constants that follow body mass and centre of mass, recomputed without allocating (FlashSAC overlay).

Why: a device env that randomizes body mass or centre of mass per world (``m.body_mass``, ``m.body_ipos`` rows in
its reset, Go2 Joystick Flat's) must then recompute what MuJoCo Warp derives from them, as UniLab's backend does with
``mujoco_warp.set_const``. That call cannot run inside the reset's CUDA-graph conditional node: ``set_const_0``
allocates on every call (``wp.clone`` of ``qpos``, ``wp.zeros`` for its work vectors; ``smooth.transmission``
allocates too), and CUDA admits no allocation in a conditional body. It also works on the env's own ``Data``: it
writes ``qpos0`` into ``d.qpos``, runs the smooth stages there, and then runs them all again from the restored
``qpos`` (the "restore" pass), about 400 launches of tiny kernels on Go2, launch-latency bound.

``MassConstants`` recomputes the same model rows with MuJoCo Warp's own kernels and smooth functions (imported from
``mujoco_warp._src.io`` and ``mujoco_warp._src.smooth``, never copied), in ``set_const``'s order of arithmetic, so
every row is bitwise what ``set_const(m, d)`` writes from the same model (``tests/test_mass_constants.py``):

- ``body_subtreemass`` (``set_const_fixed``);
- ``stat.meaninertia``, ``dof_invweight0``, ``body_invweight0``, ``cam_pos0``/``cam_poscom0``/``cam_mat0``,
  ``light_pos0``/``light_poscom0``/``light_dir0``, ``actuator_acc0`` and the dampratio resolution of
  ``actuator_biasprm`` (``set_const_0``).

How it differs from ``set_const``, and why each difference leaves the rows bitwise the same:

- Its qpos0 passes run on a scratch ``Data`` of its own (the same ``nworld``, no contact or constraint capacity:
  only the smooth stages run on it), whose ``qpos`` is set to ``m.qpos0`` once, here. Nothing writes that ``qpos``
  afterwards, so every pass starts from ``qpos0`` as ``set_const_0``'s does, with no clone and no restore pass. The
  env's ``Data`` is never touched. Nothing the env reads after its reset came from ``set_const``'s restore pass
  either: that pass recomputes derived arrays (poses, COM quantities, the inertia and its factor, actuator moments)
  from the env's ``qpos``, and the next step's forward computes every one of them from ``qpos``/``qvel`` again
  before reading it.
- Every work buffer (``set_const_0``'s right-hand sides, solutions, A-diagonals, ``dof_M0``) is allocated once,
  here, so ``recompute()`` allocates nothing and can be recorded inside a conditional node.
- ``set_const_0`` solves with the factorized inertia once per dof, per body Jacobian row and per actuator (108
  tile-Cholesky solves on Go2), each over every world. Here every chain's right-hand side gets a block of ``nworld``
  rows of one stacked array, the factor is copied into every block, and MuJoCo Warp's ``solve_LD`` runs once over
  the stacked rows: each row is its world's solve with its world's factor, the arithmetic of ``solve_m``'s. The
  dofs' unit vectors and the actuators' moments are constant right-hand sides, written once (MuJoCo Warp's
  ``_set_unit_vector`` and ``_copy_actuator_moment``). Each chain's A-diagonal entries (or ``actuator_acc0``) are
  then read from its block by MuJoCo Warp's own kernels. On Go2 the stacked arrays are 108 blocks of ``nworld`` rows
  (about 140 MB at 1024 worlds, most of it the factor's copies).
- Stages whose products no recomputed row reads are left out: ``smooth.flex`` (nothing here reads flex vertices),
  ``smooth.tendon``/``smooth.tendon_armature`` (models with tendons are refused, below), and
  ``smooth.transmission``: for joint transmissions (the only kind admitted) the actuator moments at ``qpos0`` are
  the gear and depend on ``qpos0`` and ``actuator_gear`` alone, not on mass or centre of mass, so they are computed
  once here (``transmission`` allocates, so it could not run in ``recompute()`` anyway). Static bodies' Jacobian
  rows are skipped: ``_finalize_body_invweight0`` writes zero for them without reading their A-diagonal.
- Quantities that depend on ``qpos0`` alone, not on mass or centre of mass, are left as they are: ``tendon_length0``
  and ``eq_data`` (the connect/weld anchors at ``qpos0``), and ``set_const_spring``'s ``tendon_lengthspring``.

So ``qpos0`` and ``actuator_gear`` are read once, at construction: a model whose ``qpos0`` or gears change later
needs a new ``MassConstants``. Refused in one line (``ValueError``, naming what would go stale): mocap bodies (the
scratch ``Data`` has no mocap state of the env's), tendons (``tendon_invweight0``, and ``smooth.tendon`` allocates),
transmissions other than joint ones (their moments follow the centre of mass), per-world model rows of a
world count other than 1 or ``nworld``, and an inertia with a sparse LDL region (its solve reads more of a ``Data``).
"""

from __future__ import annotations

import contextlib
import dataclasses

import mujoco
import torch
import warp as wp
from mujoco_warp._src import io as mjw_io
from mujoco_warp._src import smooth as mjw_smooth
from mujoco_warp._src.types import Data, Model, TrnType

#: The transmissions whose moments at ``qpos0`` depend on ``qpos0`` and the gear alone (see the module's docstring).
_JOINT_TRANSMISSIONS = (int(TrnType.JOINT), int(TrnType.JOINTINPARENT))
#: The per-world model rows ``recompute()`` reads or writes: each must hold 1 row (shared) or ``nworld`` rows.
_PER_WORLD_FIELDS = ("body_mass", "body_ipos", "body_iquat", "body_inertia", "body_subtreemass", "dof_armature",
                     "dof_invweight0", "body_invweight0", "cam_pos0", "cam_poscom0", "cam_mat0", "light_pos0",
                     "light_poscom0", "light_dir0", "actuator_acc0", "actuator_gainprm", "actuator_biasprm")


@dataclasses.dataclass(frozen=True)
class _Chain:
    """One solve chain of ``set_const_0``: a dof's unit vector, a body's Jacobian row, or an actuator's moment."""
    kind: str  # "dof", "body" or "actuator"
    index: int  # the dof, body or actuator id
    row: int = 0  # the body Jacobian's row (0-2 translation, 3-5 rotation)


@dataclasses.dataclass(frozen=True)
class _Worlds:
    """What MuJoCo Warp's ``solve_LD`` reads of a ``Data`` (its launch width): the stacked solve's world count."""
    nworld: int


class MassConstants:
    """``mujoco_warp.set_const``'s mass and centre-of-mass dependent rows of ``model``, recomputed by ``recompute()``
    without allocating, on a scratch ``Data`` of its own (the module's docstring says what and why).

    ``mj_model`` is the host model ``model`` was put from (``mujoco_warp.put_model``), ``nworld`` the env's world
    count; the scratch ``Data`` and every work buffer live on ``model``'s device.
    """

    def __init__(self, mj_model: mujoco.MjModel, model: Model, nworld: int) -> None:
        self._refuse_unsupported(mj_model, model, nworld)
        self._model = model
        self._device = model.qpos0.device
        nv, nu = int(mj_model.nv), int(mj_model.nu)
        with wp.ScopedDevice(self._device):
            # Only the smooth stages run on it: no contact or constraint capacity.
            self._data: Data = mjw_io.make_data(mj_model, nworld=nworld, nconmax=0, njmax=0)
            data = self._data
            if data.qLD.shape[1] > model.qLD_block_total:
                raise ValueError("MassConstants: the model's inertia has a sparse LDL region, whose solve reads "
                                 "more of a Data than its world count; use mujoco_warp.set_const")
            wp.launch(mjw_io._copy_qpos0_to_qpos, dim=(nworld, mj_model.nq), inputs=[model.qpos0],
                      outputs=[data.qpos])
            # The actuator moments at qpos0, once (joint transmissions: qpos0 and the gear alone).
            mjw_smooth.kinematics(model, data)
            mjw_smooth.com_pos(model, data)
            mjw_smooth.transmission(model, data)
            self._dof_A_diag = wp.zeros((nworld, nv), dtype=float)
            self._body_A_diag = wp.zeros((nworld, mj_model.nbody, 6), dtype=float)
            self._dof_M0 = wp.zeros((nworld, nv), dtype=float)
            chains = [_Chain("dof", dofid) for dofid in range(nv)]
            chains += [_Chain("body", bodyid, row) for bodyid in range(1, mj_model.nbody)
                       if mj_model.body_weldid[bodyid] != 0 for row in range(6)]
            self._chains = chains + [_Chain("actuator", actid) for actid in range(nu)]
            # Every chain's right-hand side, solution and copy of the factor in one block of nworld rows each: one
            # solve for all of them.
            stacked = len(self._chains) * nworld
            self._rhs = wp.zeros((stacked, nv), dtype=float)
            self._solution = wp.zeros((stacked, nv), dtype=float)
            self._factor = wp.zeros((stacked, data.qLD.shape[1]), dtype=float)
            self._diagonal = wp.zeros((stacked, data.qLDiagInv.shape[1]), dtype=float)
            self._stacked = _Worlds(stacked)
            self._blocks = [slice(k * nworld, (k + 1) * nworld) for k in range(len(self._chains))]
            # The dofs' unit vectors and the actuators' moments at qpos0 are constant: written once.
            for chain, rows in zip(self._chains, self._blocks, strict=True):
                if chain.kind == "dof":
                    wp.launch(mjw_io._set_unit_vector, dim=nworld, inputs=[chain.index], outputs=[self._rhs[rows]])
                elif chain.kind == "actuator":
                    wp.launch(mjw_io._copy_actuator_moment, dim=nworld,
                              inputs=[chain.index, data.moment_rownnz, data.moment_rowadr, data.moment_colind,
                                      data.actuator_moment], outputs=[self._rhs[rows]])
        # The factor's copies, as torch views (one copy kernel for every block; torch's kernels need no build).
        chains_count = len(self._chains)
        self._factor_blocks = wp.to_torch(self._factor).view(chains_count, nworld, -1)
        self._diagonal_blocks = wp.to_torch(self._diagonal).view(chains_count, nworld, -1)
        self._factor_source = wp.to_torch(data.qLD)
        self._diagonal_source = wp.to_torch(data.qLDiagInv)

    @staticmethod
    def _refuse_unsupported(mj_model: mujoco.MjModel, model: Model, nworld: int) -> None:
        """One line for a model whose skipped stages would change a recomputed row (the module's docstring)."""
        if mj_model.nmocap > 0:
            raise ValueError(f"MassConstants: the model has {mj_model.nmocap} mocap body(ies); its scratch Data has no "
                             "mocap state of the env's (body poses, subtree COMs); use mujoco_warp.set_const")
        if mj_model.ntendon > 0:
            raise ValueError(f"MassConstants: the model has {mj_model.ntendon} tendon(s); tendon_invweight0 is not "
                             "recomputed (smooth.tendon allocates); use mujoco_warp.set_const")
        other = sorted({int(t) for t in mj_model.actuator_trntype} - set(_JOINT_TRANSMISSIONS))
        if other:
            names = [TrnType(t).name for t in other]
            raise ValueError(f"MassConstants: actuator transmissions {names} have moments that follow the centre of "
                             "mass, computed once here; actuator_acc0 would go stale; use mujoco_warp.set_const")
        for name in _PER_WORLD_FIELDS:
            rows = getattr(model, name).shape[0]
            if rows not in (1, nworld):
                raise ValueError(f"MassConstants: the model's {name} has {rows} per-world rows, not 1 or {nworld}")

    @property
    def data(self) -> Data:
        """The scratch ``Data`` (at ``qpos0``): ``recompute()``'s work space, never the env's."""
        return self._data

    def recompute(self) -> None:
        """Every mass and centre-of-mass dependent row ``set_const`` writes, from the model's current rows, on the
        current Warp stream of the model's device: no allocation, no host synchronization."""
        m, d = self._model, self._data
        mjw_io.set_const_fixed(m, d)  # body_subtreemass (reads only the model), which com_pos divides by
        # set_const_0's pass at qpos0, but for the stages no recomputed row reads (the module's docstring).
        mjw_smooth.kinematics(m, d)
        mjw_smooth.com_pos(m, d)
        if m.ncam or m.nlight:
            mjw_smooth.camlight(m, d)
        mjw_smooth.crb(m, d)
        mjw_smooth.factor_m(m, d)
        wp.launch(mjw_io._compute_meaninertia, dim=m.stat.meaninertia.shape[0],
                  inputs=[m.nv, m.M_rownnz, m.M_rowadr, d.M], outputs=[m.stat.meaninertia])
        if m.nv > 0:
            self._run_chains()
            wp.launch(mjw_io._finalize_dof_invweight0, dim=(m.dof_invweight0.shape[0], m.nv),
                      inputs=[m.dof_jntid, m.jnt_type, m.jnt_dofadr, self._dof_A_diag], outputs=[m.dof_invweight0])
            wp.launch(mjw_io._finalize_body_invweight0, dim=(m.body_invweight0.shape[0], m.nbody),
                      inputs=[m.body_weldid, self._body_A_diag], outputs=[m.body_invweight0])
        else:
            m.body_invweight0.zero_()
        if m.ncam:
            nworld_cam = max(m.cam_pos0.shape[0], m.cam_poscom0.shape[0], m.cam_mat0.shape[0])
            wp.launch(mjw_io._compute_cam_pos0, dim=(nworld_cam, m.ncam),
                      inputs=[m.cam_bodyid, m.cam_targetbodyid, d.cam_xpos, d.cam_xmat, d.xpos, d.subtree_com],
                      outputs=[m.cam_pos0, m.cam_poscom0, m.cam_mat0])
        if m.nlight:
            nworld_light = max(m.light_pos0.shape[0], m.light_poscom0.shape[0], m.light_dir0.shape[0])
            wp.launch(mjw_io._compute_light_pos0, dim=(nworld_light, m.nlight),
                      inputs=[m.light_bodyid, m.light_targetbodyid, d.light_xpos, d.light_xdir, d.xpos, d.subtree_com],
                      outputs=[m.light_pos0, m.light_poscom0, m.light_dir0])
        if m.nu > 0 and m.nv > 0:
            wp.launch(mjw_io._compute_dof_M0, dim=(d.nworld, m.nv),
                      inputs=[m.dof_bodyid, m.dof_armature, d.cdof, d.crb], outputs=[self._dof_M0])
            wp.launch(mjw_io._resolve_dampratio, dim=(m.actuator_biasprm.shape[0], m.nu),
                      inputs=[m.actuator_biastype, m.actuator_gainprm, d.moment_rownnz, d.moment_rowadr,
                              d.moment_colind, d.actuator_moment, self._dof_M0, m.nv],
                      outputs=[m.actuator_biasprm])

    def _run_chains(self) -> None:
        """``set_const_0``'s loop bodies with one solve: each body row's Jacobian into its block of the right-hand
        sides (MuJoCo Warp's ``_compute_body_jac_row``), the factor copied into every block, MuJoCo Warp's
        ``solve_LD`` once over all blocks (each row of a block is its world's solve, the arithmetic of
        ``solve_m``'s), then each chain's entries of the A-diagonals or of ``actuator_acc0`` from its block."""
        m, d = self._model, self._data
        nworld = d.nworld
        for chain, rows in zip(self._chains, self._blocks, strict=True):
            if chain.kind == "body":
                wp.launch(mjw_io._compute_body_jac_row, dim=nworld,
                          inputs=[m.nv, chain.index, chain.row, m.body_parentid, m.body_rootid, m.body_dofadr,
                                  m.body_dofnum, m.dof_parentid, d.subtree_com, d.xipos, d.cdof],
                          outputs=[self._rhs[rows]])
        with self._on_warp_stream():
            self._factor_blocks.copy_(self._factor_source.expand_as(self._factor_blocks))
            self._diagonal_blocks.copy_(self._diagonal_source.expand_as(self._diagonal_blocks))
        mjw_smooth.solve_LD(m, self._stacked, self._factor, self._diagonal, self._solution, self._rhs)
        for chain, rows in zip(self._chains, self._blocks, strict=True):
            solution = self._solution[rows]
            if chain.kind == "dof":
                wp.launch(mjw_io._extract_dof_A_diag, dim=nworld, inputs=[chain.index, solution],
                          outputs=[self._dof_A_diag])
            elif chain.kind == "body":
                wp.launch(mjw_io._compute_body_A_diag_entry, dim=nworld,
                          inputs=[m.nv, chain.index, chain.row, self._rhs[rows], solution], outputs=[self._body_A_diag])
            else:
                wp.launch(mjw_io._compute_actuator_acc0, dim=m.actuator_acc0.shape[0],
                          inputs=[chain.index, m.nv, solution], outputs=[m.actuator_acc0])

    def _on_warp_stream(self) -> contextlib.AbstractContextManager[None]:
        """torch's work on Warp's current stream of the device (ordered with the Warp launches around it, and inside
        a CUDA graph being recorded there); on the CPU, as it comes."""
        if not self._device.is_cuda:
            return contextlib.nullcontext()
        stream = torch.cuda.ExternalStream(wp.get_stream(self._device).cuda_stream,
                                           device=torch.device("cuda", self._device.ordinal))
        return torch.cuda.stream(stream)
