"""MuJoCo Warp backend pieces: the reset that commits only the reset rows, the kernels built ahead, and the model
constants that follow mass and centre of mass, recomputed without allocating."""
