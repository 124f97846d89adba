"""patchset: carries the FlashSAC learner patch series onto pinned UniLab / unilab-rl trees.

Data flow: series -> plan -> check -> apply -> state -> provenance. Each step lives in its own module.
"""

TOOL_VERSION = "0.1.0"
