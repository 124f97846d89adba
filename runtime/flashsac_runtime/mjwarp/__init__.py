"""MuJoCo Warp backend pieces: the reset that commits only the reset rows, and the kernels built ahead."""
