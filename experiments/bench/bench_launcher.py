"""Launching the real trainer as a child process, with UniLab's live Rich panel visible.

Rich only draws its live panel when stdout is a terminal; behind a pipe the trainer
would print one final screen. So when our own stdout is a terminal the child gets a
pseudo-terminal of the same size and its bytes are copied through as they come; in a
log (CI, the lent GPU machine) it gets a pipe and the log stays readable. The child
runs in its own process group so that a timeout or Ctrl-C also ends the collectors
it spawned, and nothing else.

Used by ``benchmark_flashsac_training.py`` for the trainer, once per run.
"""

from __future__ import annotations

import collections
import fcntl
import os
import pty
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

PanelMode = Literal["auto", "always", "never"]
_TAIL_BYTES = 32 * 1024


@dataclass
class ChildResult:
    """How the trainer ended, and the end of what it printed (for the run JSON on failure)."""

    returncode: int
    timed_out: bool
    wall_s: float
    output_tail: str


def _use_pty(mode: PanelMode) -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    return sys.stdout.isatty()


def _set_winsize(fd: int) -> None:
    """Give the pseudo-terminal our terminal's size so the panel lays out as in a direct run."""
    size = shutil.get_terminal_size((120, 40))
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", size.lines, size.columns, 0, 0))


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, the child's own process group (trainer + its collectors)."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_child(
    command: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    panel: PanelMode = "auto",
    timeout_s: float | None = None,
) -> ChildResult:
    """Run ``command``, mirroring its output live; returns its exit status and output tail."""
    tail: collections.deque[bytes] = collections.deque()
    tail_len = 0
    out = sys.stdout.buffer
    start = time.monotonic()
    use_pty = _use_pty(panel)
    master_fd = -1
    if use_pty:
        master_fd, slave_fd = pty.openpty()
        _set_winsize(slave_fd)
        process = subprocess.Popen(
            list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=slave_fd, stderr=slave_fd, start_new_session=True,
        )
        os.close(slave_fd)
        read_fd = master_fd
    else:
        process = subprocess.Popen(
            list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        )
        assert process.stdout is not None
        read_fd = process.stdout.fileno()
    timed_out = False
    try:
        while True:
            if timeout_s is not None and time.monotonic() - start > timeout_s:
                timed_out = True
                _end_group(process)
                break
            readable, _, _ = select.select([read_fd], [], [], 0.2)
            data = b""
            if readable:
                try:
                    data = os.read(read_fd, 65536)
                except OSError:  # EIO: the pty's other side closed
                    data = b""
                if data:
                    out.write(data)
                    out.flush()
                    tail.append(data)
                    tail_len += len(data)
                    while tail_len > _TAIL_BYTES and len(tail) > 1:
                        tail_len -= len(tail.popleft())
            if not data and process.poll() is not None:
                break
    except KeyboardInterrupt:
        _end_group(process)
        raise
    finally:
        if master_fd >= 0:
            os.close(master_fd)
        if process.poll() is None and not timed_out:
            process.wait()
    returncode = process.wait()
    if timed_out:
        returncode = 124
    return ChildResult(
        returncode=returncode,
        timed_out=timed_out,
        wall_s=time.monotonic() - start,
        output_tail=b"".join(tail).decode("utf-8", errors="replace"),
    )
