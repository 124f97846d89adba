"""The numerics study of the patched FlashSAC learner (entry: experiments/validate_numerics.py).

``config``: the worker's configuration and the study's constants; ``worker``: one learner
run in its own interpreter; ``probes``: what a worker measures besides training;
``compare``: state and first-update comparisons with their tolerances; ``gates``: the
checks over workers' results; ``modes``: the CPU and GPU runs; ``cli``: the command line.
"""
