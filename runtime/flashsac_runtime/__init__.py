"""The FlashSAC overlay's own runtime: the code the project adds to UniLab, unilab-rl and unisim.

`make apply` places this package into the overlay beside the patched ``uni_rl`` and ``unisim`` (first on
PYTHONPATH at run time) and records the sha256 of each of its files, like the patched ones; the series'
patches to upstream files import it where they plug it in. Subpackages by purpose:

- ``learner``: the learner's update as CUDA graphs, its metrics read once an iteration, its compile behind.
- ``collector``: the device-resident collector (env step, replay ring and learner in one process on the GPU).
- ``envs``: device-resident envs (G1 Walk Flat on MuJoCo Warp) for that collector.
- ``mjwarp``: MuJoCo Warp's row-wise reset, its kernels built ahead, the constants that follow mass (``set_const``'s).
- ``preemption``, ``background_writer``, ``dp_transport``, ``cuda_capture``, ``staged_read``: a run's safe
  stop, its TensorBoard writer process, data parallel's transport, and pieces the others share.
"""
