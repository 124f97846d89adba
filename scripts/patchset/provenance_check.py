"""`patchset provenance`: import uni_rl in the UniLab interpreter with the overlay first and judge the record."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from .applier import Options, Outcome, overlay_for, python_command, resolve_checkout
from .errors import PatchsetError
from .state import load_state

_IMPORT = "import uni_rl, uni_rl.algos.flash_sac.learner"


def run_provenance(opts: Options) -> Outcome:
    """Fail unless every imported uni_rl file comes from the overlay and matches its post-patch hash."""
    checkout = resolve_checkout(opts, create=False)
    python = python_command(opts, checkout)
    overlay = overlay_for(opts, checkout, load_state(checkout))
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(overlay), str(checkout / "src")]),
               "FLASHSAC_PROVENANCE_DIR": tmp, "FLASHSAC_UNILAB_ROOT": str(checkout)}
        proc = subprocess.run([*python, "-c", _IMPORT], env=env, cwd=checkout, capture_output=True, text=True, check=False)
        records = [json.loads(p.read_text()) for p in Path(tmp).glob("provenance-*.json")]
    if proc.returncode != 0 or not records:
        last = (proc.stderr.strip().splitlines() or ["no provenance record written"])[-1]
        raise PatchsetError(f"importing uni_rl with the overlay failed: {last}")
    record = records[0]
    uni_rl = [m for m in record["modules"] if m["name"].startswith("uni_rl")]
    bad = [m["name"] for m in uni_rl if m["origin"] != "overlay" or m["matches"] is not True]
    if record["flagged"] or bad:
        raise PatchsetError("; ".join(record["warnings"]) or f"uni_rl modules not from the overlay: {', '.join(bad)}")
    lines = [f"uni_rl: {len(uni_rl)} module(s) imported from {record['overlay_dir']}, all match the applied series",
             f"interpreter: {record['executable']}", f"versions: {record['versions']} ({record['versions_note']})"]
    return Outcome(lines, record)
