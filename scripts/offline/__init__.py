"""The offline GPU host: a wheelhouse built on a networked machine, verified and installed on a host without one.

`make wheelhouse` (build.py) downloads the pinned wheel list for the host's Python and platform, builds the
two source-only projects into pure-Python wheels, adds every pinned artifact an apply reads (the UniLab sdist,
the unilab-rl base wheel, the unisim-core sdist) and the G1 and Go2 assets, and records the sha256 of every file.
`make ... OFFLINE=<wheelhouse>` (host.py) verifies every sha256 before it installs anything into a private site
folder with pip's --no-index.
"""


class OfflineError(Exception):
    """A refusal the user can act on; its message is a single line (the CLI prints it and exits 1)."""

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))
