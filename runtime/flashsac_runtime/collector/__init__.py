"""The device-resident collector: env step, replay ring and learner in one process, on the GPU
(``training.collector=device``)."""
