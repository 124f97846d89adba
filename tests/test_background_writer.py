"""The loggers' TensorBoard scalars are written by a worker thread (uni_rl 0031), and the files say the same.

``uni_rl.logging.background_writer.BackgroundScalarWriter`` queues each ``add_scalar`` and a daemon thread
makes the call; the event file must hold exactly what a plain ``SummaryWriter`` given the same calls holds
(tags, values, steps, in order), and an error of the thread must reach the caller. Run in a fresh process
with the applied overlay first on the path. Controls: the comparison sees one dropped scalar; a writer that
fails on its third scalar makes ``close`` raise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r'''
import json, sys
from torch.utils.tensorboard import SummaryWriter
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from uni_rl.logging.background_writer import BackgroundScalarWriter
from pathlib import Path

root, mode = Path(sys.argv[1]), sys.argv[2]
calls = [(f"group/{name}", float(step * 10 + i) / 7, step) for step in range(200) for i, name in enumerate("abcde")]

def scalars(folder):
    out = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                out.append([value.tag, round(float(value.tensor.float_val[0] if value.HasField("tensor") else value.simple_value), 6), event.step])
    return out

if mode == "failing":
    class Failing:
        count = 0
        def add_scalar(self, *args):
            Failing.count += 1
            if Failing.count == 3:
                raise OSError("disk full")
        def close(self):
            pass
    writer = BackgroundScalarWriter(Failing())
    for call in calls[:10]:
        try:
            writer.add_scalar(*call)
        except RuntimeError:
            pass
    try:
        writer.close()
    except RuntimeError as exc:
        print(json.dumps({"close_raised": str(exc)}))
    else:
        print(json.dumps({"close_raised": None}))
    sys.exit(0)
plain, background = SummaryWriter(str(root / "plain")), BackgroundScalarWriter(SummaryWriter(str(root / "background")))
for call in calls:
    plain.add_scalar(*call)
    if not (mode == "dropped" and call == calls[517]):
        background.add_scalar(*call)
plain.close(); background.close()
a, b = scalars(root / "plain"), scalars(root / "background")
print(json.dumps({"count": len(a), "equal": a == b}))
'''


def _run(overlay: Path, tmp_path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(overlay)}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), mode], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def overlay(applied_session: tuple[Path, Path]) -> Path:
    return applied_session[1]


def test_the_event_file_holds_what_a_plain_writer_writes(overlay: Path, tmp_path: Path) -> None:
    assert _run(overlay, tmp_path, "same") == {"count": 1000, "equal": True}


def test_a_dropped_scalar_is_seen(overlay: Path, tmp_path: Path) -> None:
    assert _run(overlay, tmp_path, "dropped") == {"count": 1000, "equal": False}


def test_an_error_of_the_writer_thread_reaches_close(overlay: Path, tmp_path: Path) -> None:
    assert "disk full" in (_run(overlay, tmp_path, "failing")["close_raised"] or "")
