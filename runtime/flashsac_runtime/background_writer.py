"""TensorBoard scalars written by a helper process, so the training loop only hands them over.

An off-policy iteration logs a few dozen scalars; ``SummaryWriter.add_scalar`` builds and serializes an event
for each, about 2-5 ms of host time per iteration on the machines we measured. A writer thread in the trainer
takes that off the loop's line but not off its interpreter: the thread holds the GIL for milliseconds while the
loop launches the next iteration's work, and the device waits for those launches. Here the loop collects the
``(tag, value, step)`` of one step and sends them as one message to a spawned process that owns the
``SummaryWriter`` and makes the same ``add_scalar`` calls in the same order: the event files hold the same
scalars at the same steps. A step's message goes when the next step's first scalar comes (or at ``close``), so
TensorBoard shows each step one step later than a direct writer would. ``close`` sends what is left, waits for the process and raises if it failed (an
``add_scalar`` after a failure raises too). The process ignores the stop signals (the trainer's to handle) and
ends when the trainer's end of the pipe closes, so it never outlives the trainer.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from typing import Any

_SPAWN = multiprocessing.get_context("spawn")
#: A step's scalars go as one message; a step with more than this many is sent in parts.
_BATCH = 512


def _writer_main(factory: Callable[..., Any], args: tuple[Any, ...], conn: Any) -> None:
    """The helper process: build the writer, write every batch received, close it at the end or at EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    writer, failed = None, False
    try:
        writer = factory(*args)
        while True:
            try:
                batch = conn.recv()
            except EOFError:  # the trainer is gone
                break
            if batch is None:
                break
            for call in batch:
                writer.add_scalar(*call)
    except BaseException as exc:  # noqa: BLE001 - reported to the trainer, which raises it
        failed = True
        conn.send(repr(exc))
    finally:
        if writer is not None:
            writer.close()
    if not failed:
        conn.send(None)


class BackgroundScalarWriter:
    """``add_scalar`` and ``close`` of the writer ``factory(*args)`` builds, the writes made by a helper process."""

    def __init__(self, factory: Callable[..., Any], *args: Any) -> None:
        self._conn, child = _SPAWN.Pipe()
        self._process = _SPAWN.Process(target=_writer_main, args=(factory, args, child),
                                       name="tensorboard-scalars", daemon=True)
        self._process.start()
        child.close()
        self._batch: list[tuple[str, Any, int | None]] = []
        self._error: str | None = None

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None) -> None:
        if self._batch and (self._batch[-1][2] != global_step or len(self._batch) >= _BATCH):
            self._send()
        # A tensor or NumPy scalar goes as its Python number (what the writer would read of it).
        value = scalar_value.item() if hasattr(scalar_value, "item") else scalar_value
        self._batch.append((tag, value, global_step))

    def _send(self) -> None:
        self._check()
        batch, self._batch = self._batch, []
        try:
            self._conn.send(batch)
        except (BrokenPipeError, EOFError, OSError):
            self._check(wait=True)
            raise RuntimeError(f"the TensorBoard writer process exited {self._process.exitcode}") from None

    def _check(self, wait: bool = False) -> None:
        """Raise the helper's error, if it reported one (``wait``: give it a second to say it)."""
        if self._error is None and self._conn.poll(1.0 if wait else 0):
            try:
                self._error = self._conn.recv()
            except EOFError:
                self._error = None
        if self._error is not None:
            raise RuntimeError(f"the TensorBoard writer process failed: {self._error}")

    def close(self) -> None:
        try:
            if self._batch:
                self._send()
            self._conn.send(None)
        except (RuntimeError, OSError):
            pass  # the helper failed or is gone: its error or exit code is raised below
        self._process.join()
        try:
            self._check()
        finally:
            self._conn.close()
        if self._process.exitcode != 0:
            raise RuntimeError(f"the TensorBoard writer process exited {self._process.exitcode}")
