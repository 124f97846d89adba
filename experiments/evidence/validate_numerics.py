"""Numerical validation of the patched FlashSAC learner against unpatched unilab-rl 1.3.2.

The entry of the ``numerics`` package (experiments/evidence/numerics/: what each mode checks is
described in ``numerics.modes``):

    python3 experiments/evidence/validate_numerics.py --mode cpu|gpu --baseline-root DIR \\
        --patched-root DIR --output FILE.json

Run by ``make bench`` first (``CHECK_NUMERICS``, GPU mode), by ``device/device_evidence.sh checks``, and
in CPU mode by ``tests/test_learner_patches.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from numerics.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
