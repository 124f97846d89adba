"""The loggers' TensorBoard scalars are written by a helper process (uni_rl 0012), and the files say the same.

``flashsac_runtime.background_writer.BackgroundScalarWriter`` sends each step's ``add_scalar`` calls to a spawned
process that makes them; the event file must hold exactly what a plain ``SummaryWriter`` given the same calls
holds (tags, values, steps, in order), an error of the process must reach the caller, and the process must not
outlive a trainer killed with SIGKILL. Run in a fresh process with the applied overlay first on the path.
Controls: the comparison sees one dropped scalar; a writer that fails on its third scalar makes ``close``
raise; the liveness probe sees the process while its trainer lives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

SCRIPT = r'''
import json, sys
from torch.utils.tensorboard import SummaryWriter
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
from flashsac_runtime.background_writer import BackgroundScalarWriter
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

if mode in ("killed", "alive"):
    import os, signal, time
    writer = BackgroundScalarWriter(SummaryWriter, str(root / "killed"))
    for call in calls[:20]:
        writer.add_scalar(*call)
    print(json.dumps({"helper": writer._process.pid}), flush=True)
    time.sleep(2)
    if mode == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)
    sys.exit(0)
if mode == "failing":
    from failing_writer import Failing
    writer = BackgroundScalarWriter(Failing)
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
plain, background = SummaryWriter(str(root / "plain")), BackgroundScalarWriter(SummaryWriter, str(root / "background"))
for call in calls:
    plain.add_scalar(*call)
    if not (mode == "dropped" and call == calls[517]):
        background.add_scalar(*call)
plain.close(); background.close()
a, b = scalars(root / "plain"), scalars(root / "background")
print(json.dumps({"count": len(a), "equal": a == b}))
'''


FAILING = """
class Failing:
    count = 0
    def add_scalar(self, *args):
        Failing.count += 1
        if Failing.count == 3:
            raise OSError("disk full")
    def close(self):
        pass
"""


def _run(overlay: Path, tmp_path: Path, mode: str) -> dict:
    (tmp_path / "failing_writer.py").write_text(FAILING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(overlay), str(tmp_path)))}
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


def test_an_error_of_the_writer_process_reaches_close(overlay: Path, tmp_path: Path) -> None:
    assert "disk full" in (_run(overlay, tmp_path, "failing")["close_raised"] or "")


def _helper_left(overlay: Path, tmp_path: Path, mode: str) -> bool:
    """Whether the writer process still runs 5 s after its trainer was killed (``killed``) or while it lives."""
    tmp_path.mkdir(parents=True)
    (tmp_path / "failing_writer.py").write_text(FAILING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(overlay), str(tmp_path)))}
    trainer = subprocess.Popen([sys.executable, "-c", SCRIPT, str(tmp_path), mode], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        helper = json.loads(trainer.stdout.readline())["helper"]
        if mode == "killed":
            trainer.wait(timeout=60)
        for _ in range(50):
            time.sleep(0.1)
            try:
                if psutil.Process(helper).status() == psutil.STATUS_ZOMBIE:
                    return False
            except psutil.NoSuchProcess:
                return False
        return True
    finally:
        trainer.kill()
        trainer.wait()


def test_the_writer_process_ends_with_a_killed_trainer(overlay: Path, tmp_path: Path) -> None:
    assert _helper_left(overlay, tmp_path / "a", "alive") is True  # control: the probe sees a living helper
    assert _helper_left(overlay, tmp_path / "b", "killed") is False
