"""The learner's runtime: whole updates as CUDA graphs, per-update metrics read once an iteration, the graphed
inference forward, and the compile that runs behind training until it can swap in."""
