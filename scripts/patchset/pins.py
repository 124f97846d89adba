"""The pinned stack (VERSIONS.env) and the check of what is really installed in the UniLab interpreter."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from .errors import PatchsetError
from .paths import VERSIONS_FILE

# distribution name -> VERSIONS.env key of the version the UniLab environment must have installed
INSTALLED_PINS = {
    "unilab": "UNILAB_VERSION",
    "unilab-rl": "UNILAB_RL_VERSION",
    "unisim-core": "UNISIM_CORE_VERSION",
    "torch": "TORCH_VERSION",
    "mujoco": "MUJOCO_VERSION",
}
# the same for UniLab's optional mjwarp extra (GPU physics): pinned, installed by `make setup` and the offline
# wheelhouse, required only by runs on MuJoCo Warp
GPU_PHYSICS_PINS = {
    "mujoco-warp": "MUJOCO_WARP_VERSION",
    "warp-lang": "WARP_LANG_VERSION",
}


class Pins(dict[str, str]):
    """VERSIONS.env's KEY=VALUE pairs. Reading a key the file lacks is a one-line refusal naming the file and the
    key, not a KeyError: every reader (the applier, the offline tools, the benches) then stops with a line that
    says what to restore, and the applier before anything changed, since it reads its pins before it writes."""

    def __init__(self, path: Path, pairs: dict[str, str]) -> None:
        super().__init__(pairs)
        self.path = path

    def __missing__(self, key: str) -> str:
        empty = " (the file is empty)" if not self else ""
        raise PatchsetError(f"{self.path} has no {key}= line{empty}; restore the file with git")


def load_pins(path: Path = VERSIONS_FILE) -> Pins:
    """Parse KEY=VALUE lines; comments and blank lines are ignored, anything else is an error."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        number = raw[:exc.start].count(b"\n") + 1
        raise PatchsetError(f"{path}:{number} is not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                            "restore the file with git") from None
    pins: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        if not sep or not key.strip():
            raise PatchsetError(f"{path}:{number}: expected KEY=VALUE, got {line!r}")
        pins[key.strip()] = value.strip()
    return Pins(path, pins)


@dataclass(frozen=True)
class VersionCheck:
    """Expected vs found version of one distribution in the UniLab interpreter."""

    name: str
    expected: str
    found: str | None

    @property
    def ok(self) -> bool:
        return self.found is not None and versions_match(self.expected, self.found)

    def describe(self) -> str:
        return f"{self.name} expected {self.expected}, found {self.found or 'not installed'}"


def versions_match(expected: str, found: str) -> bool:
    """Compare public versions; a local label (+cu128) must match only when both sides carry one.

    PyPI wheels cannot carry local labels, so torch's metadata says 2.8.0 for the cu128 build that the pin
    spells 2.8.0+cu128; a found 2.8.0+cpu, however, is a different build and does not match.
    """
    try:
        want, have = Version(expected), Version(found)
    except InvalidVersion:
        return expected == found
    if want.public != have.public:
        return False
    return want.local is None or have.local is None or want.local == have.local


_PROBE = (
    "import json, sys, importlib.metadata as m\n"
    "out = {}\n"
    "for name in sys.argv[1:]:\n"
    "    try: out[name] = m.version(name)\n"
    "    except m.PackageNotFoundError: out[name] = None\n"
    "print(json.dumps(out))\n"
)


def installed_versions(python_cmd: list[str], names: list[str]) -> dict[str, str | None]:
    """Ask the interpreter that will run UniLab (not ours) which versions it has installed."""
    try:
        proc = subprocess.run(
            [*python_cmd, "-c", _PROBE, *names],
            capture_output=True, text=True, timeout=120, check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PatchsetError(f"cannot run the UniLab interpreter {' '.join(python_cmd)}: {exc}") from exc
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise PatchsetError(f"the UniLab interpreter {' '.join(python_cmd)} failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def check_installed(python_cmd: list[str], pins: dict[str, str]) -> list[VersionCheck]:
    """One VersionCheck per pinned distribution, in a stable order."""
    found = installed_versions(python_cmd, list(INSTALLED_PINS))
    return [VersionCheck(name, pins[key], found.get(name)) for name, key in INSTALLED_PINS.items()]
