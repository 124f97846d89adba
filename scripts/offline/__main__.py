"""`python -m offline` (with scripts/ on PYTHONPATH)."""

import sys

from .cli import main

sys.exit(main())
