"""The numerics study of the patched FlashSAC learner (entry: experiments/evidence/validate_numerics.py).

``config``: the worker's configuration and the study's constants; ``worker``: one learner
run in its own interpreter, on the learner ``learner`` builds; ``probes``: what a worker
measures besides training; ``compare``: state and first-update comparisons with their
tolerances; ``gates`` and ``configurations``: the checks over the workers' results;
``modes``: the CPU and GPU runs and the declared checks; ``cli``: the command line.
"""
