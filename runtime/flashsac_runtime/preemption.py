"""A training run that survives its own faults: a stop signal, a dead collector, a resume.

- ``StopSignals`` (both runners install it in ``learn``, in the main thread): the first SIGTERM or SIGINT
  only records the signal; the runner checks it at iteration boundaries and while it waits for the
  collector, abandons the iteration in progress, writes a checkpoint of the last finished iteration
  and raises ``TrainingInterrupted``; UniLab's entry point prints one line and exits with
  ``128 + signal`` (143 for SIGTERM, 130 for SIGINT). A second signal, or the grace period
  (``FLASHSAC_STOP_GRACE_S``, default 20 s) running out, exits at once with the same code after killing
  every child process the run started (the collector, the multiprocessing resource tracker).
- ``save_atomically``: every checkpoint is written to a temporary beside its destination, fsynced and
  renamed into place (then the directory is fsynced): a kill at any moment leaves the previous file or
  the new one, never a torn ``.pt``.
- ``training_state`` / ``restore_training_state``: what a resume needs beyond the learner's state dict
  (the iteration, every RNG state, the device collector's replay ring, env and loop state), stored under
  ``"training_state"`` in the same checkpoint file, so that UniLab's loaders still read it.
- ``CollectorDied``: the collector process is gone; one line names it and how it ended.
- ``install_collector_safeguards``: in the spawned collector: SIGINT/SIGTERM are the learner's to handle
  (ignored here; the learner stops the collector through its stop event), and the collector dies with
  its parent (``PR_SET_PDEATHSIG``), so a learner killed by ``kill -9``, a CUDA error or an OOM leaves
  no collector behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

from flashsac_runtime import stop_grace

#: Signals that stop a run gracefully, and the exit code each ends the process with (128 + signal).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The key of the resume state inside a checkpoint (beside the learner's own keys).
STATE_KEY = "training_state"
_PR_SET_PDEATHSIG = 1


def exit_code(signum: int) -> int:
    return 128 + int(signum)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class TrainingInterrupted(Exception):
    """The run stopped on a signal after writing ``checkpoint`` (None: no finished iteration to save)."""

    def __init__(self, signum: int, iteration: int, checkpoint: str | None, seconds: float) -> None:
        self.signum, self.iteration, self.checkpoint, self.seconds = signum, iteration, checkpoint, seconds
        saved = f"checkpoint {checkpoint}" if checkpoint else "no checkpoint (no iteration finished)"
        super().__init__(
            f"training stopped by {signal_name(signum)} after iteration {iteration}: {saved} "
            f"({seconds:.1f} s after the signal; resume with algo.resume=true)"
        )

    @property
    def exit_code(self) -> int:
        return exit_code(self.signum)


class CollectorDied(RuntimeError):
    """The collector process ended while the learner needed it."""


class _Stop(Exception):
    """Raised inside a runner's wait loop once a stop signal arrived; turned into TrainingInterrupted."""


def _kill_process(process: Any) -> None:
    with contextlib.suppress(Exception):
        if process is not None and process.is_alive():
            process.kill()
            process.join(timeout=2.0)


def stop_resource_tracker() -> None:
    """End multiprocessing's resource tracker (a child of this process once shared memory was made).

    Closing its pipe makes it unlink what is still registered and exit; it is waited for briefly.
    """
    from multiprocessing import resource_tracker

    tracker = getattr(resource_tracker, "_resource_tracker", None)
    fd, pid = getattr(tracker, "_fd", None), getattr(tracker, "_pid", None)
    if tracker is None or fd is None:
        return
    with contextlib.suppress(OSError):
        os.close(fd)
    tracker._fd = None  # noqa: SLF001
    tracker._pid = None  # noqa: SLF001
    if pid is None:
        return
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == 0:
                time.sleep(0.02)
                continue
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


class StopSignals:
    """SIGTERM/SIGINT handling for one ``learn`` call (a no-op outside the main thread).

    ``children`` returns the processes to kill on a forced exit; ``label`` names the runner in the lines.
    """

    def __init__(self, children: Callable[[], list[Any]] = list, *, label: str = "training") -> None:
        self._children = children
        self._label = label
        self.signum: int | None = None
        self.received_at: float | None = None
        self._previous: dict[int, Any] = {}
        self._grace_s = stop_grace.grace_s()

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def seconds_since(self) -> float:
        return 0.0 if self.received_at is None else time.monotonic() - self.received_at

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.signum is not None:
            return  # after a stop the handlers stay: a second signal during the cleanup still exits at once
        for sig, previous in self._previous.items():
            with contextlib.suppress(Exception):
                signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        del frame
        if self.signum is None:
            self.signum, self.received_at = signum, time.monotonic()
            _say(f"{signal_name(signum)} received: the {self._label} stops at the next iteration boundary and "
                 f"writes a checkpoint (a second signal exits at once; forced exit after {self._grace_s:g} s)")
            timer = threading.Timer(self._grace_s, self._force_exit, args=(signum, "the grace period ran out"))
            timer.daemon = True
            timer.start()
            return
        self._force_exit(signum, f"second {signal_name(signum)}")

    def _force_exit(self, signum: int, why: str) -> None:
        for child in self._children():
            _kill_process(child)
        stop_resource_tracker()
        for tmp in list(_WRITING):  # a checkpoint cut short leaves no temporary beside the last good one
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        _say(f"{why}: exiting now without a checkpoint, child processes stopped (exit {exit_code(signum)})")
        os._exit(exit_code(signum))

    def check(self) -> None:
        """Raise ``_Stop`` once a signal arrived (called where the runner may abandon its iteration)."""
        if self.signum is not None:
            raise _Stop


def _say(line: str) -> None:
    with contextlib.suppress(Exception):
        os.write(sys.stderr.fileno(), (line + "\n").encode())


# --- atomic checkpoints -----------------------------------------------------------------------------------


#: Temporaries being written: a forced exit (``os._exit`` skips every ``finally``) unlinks them first.
_WRITING: set[str] = set()


def save_atomically(obj: Any, path: str) -> str:
    """``torch.save`` to a temporary in the destination's directory, fsync, rename, fsync the directory."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    _WRITING.add(tmp)
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        _WRITING.discard(tmp)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


# --- resume state -----------------------------------------------------------------------------------------


def rng_states(device: torch.device | str | None = None) -> dict[str, Any]:
    """Python's, NumPy's, torch's CPU and (when used) the device's default generator states."""
    states: dict[str, Any] = {
        "python": random.getstate(),
        # As a tensor and plain values: checkpoints stay loadable with torch.load(weights_only=True).
        "numpy": _numpy_state_portable(np.random.get_state()),
        "torch": torch.get_rng_state(),
    }
    device = torch.device(device) if device is not None else None
    if device is not None and device.type == "cuda" and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def restore_rng_states(states: dict[str, Any], device: torch.device | str | None = None) -> None:
    """Set every generator ``rng_states`` saved (host byte tensors, as ``read_resume_state`` returns them)."""
    random.setstate(_as_python_rng_state(states["python"]))
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, np.asarray(keys.numpy(), dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    torch.set_rng_state(states["torch"])
    device = torch.device(device) if device is not None else None
    if "cuda" in states and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"], device)


def _numpy_state_portable(state: tuple) -> tuple:
    kind, keys, pos, has_gauss, cached = state
    return (str(kind), torch.from_numpy(np.asarray(keys, dtype=np.int64)), int(pos), int(has_gauss), float(cached))


def _as_python_rng_state(state: Any) -> tuple:
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


def _is_warp_array(value: Any) -> bool:
    return type(value).__module__.startswith("warp") and hasattr(value, "ptr") and hasattr(value, "shape")


#: Objects the env snapshot descends into: the env's own state holders, never a host (NumPy) env. Skipped: what
#: is not the env's state (the host env, the model, graphs, streams) and its ``step_stamps`` (the timestamps of its
#: steps' parts: times, which a resumed run makes anew, not state).
_SNAPSHOT_MODULES = ("flashsac_runtime", "uni_rl", "mujoco_warp")
_SNAPSHOT_SKIP = frozenset({"host_env", "_model", "_graph", "_curriculum", "stream", "_wp", "_mjw", "step_stamps"})


def _snapshot_fields(obj: Any, prefix: str, seen: set[int], depth: int) -> Iterator[tuple[str, Any]]:
    if depth > 4 or id(obj) in seen:
        return
    seen.add(id(obj))
    fields = obj._asdict() if hasattr(obj, "_asdict") else getattr(obj, "__dict__", None)
    if not isinstance(fields, dict):
        return
    for name, value in sorted(fields.items()):
        if name in _SNAPSHOT_SKIP:
            continue
        key = f"{prefix}{name}"
        if isinstance(value, torch.Tensor):
            yield key, value
        elif isinstance(value, torch.Generator):
            yield key, value
        elif _is_warp_array(value):
            yield key, value
        elif type(value).__module__.startswith(_SNAPSHOT_MODULES) and not isinstance(value, type):
            yield from _snapshot_fields(value, f"{key}.", seen, depth + 1)


def _writable(tensor: torch.Tensor) -> bool:
    """A tensor whose elements each own their memory (a broadcast view cannot be written row by row)."""
    return all(stride != 0 for stride, size in zip(tensor.stride(), tensor.shape) if size > 1)


def env_state(env: Any) -> dict[str, Any] | None:
    """The device env's state: its ``state_dict()`` when it has one, else every tensor, generator and
    MuJoCo Warp array reachable from it (its own state holders, not a host env or the shared model).

    None when nothing is found (an env that keeps its state elsewhere, e.g. a NumPy env behind an adapter):
    a resume then starts its episodes from a reset.
    """
    own = getattr(env, "state_dict", None)
    if callable(own):
        return {"own": own()}
    out: dict[str, Any] = {}
    for key, value in _snapshot_fields(env, "", set(), 0):
        if isinstance(value, torch.Generator):
            out[key] = ("generator", value.get_state())
            continue
        if _is_warp_array(value):
            import warp as wp

            value = wp.to_torch(value)
        if isinstance(value, torch.Tensor) and _writable(value):
            out[key] = ("tensor", value.detach().clone())
    return out or None


def load_env_state(env: Any, state: dict[str, Any]) -> None:
    """Write ``env_state``'s values back in place (CUDA graphs recorded on the env's buffers stay valid)."""
    if "own" in state:
        env.load_state_dict(state["own"])
        return
    live = dict(_snapshot_fields(env, "", set(), 0))
    missing = sorted(set(state) - set(live))
    if missing:
        raise ValueError(f"the checkpoint's env state has {missing[:5]} that this env lacks")
    for key, (kind, saved) in state.items():
        value = live[key]
        if kind == "generator":
            value.set_state(saved)
            continue
        if _is_warp_array(value):
            import warp as wp

            value = wp.to_torch(value)
        value.copy_(saved.to(value.device))


def read_checkpoint(path: str, map_location: Any = "cpu") -> dict[str, Any]:
    return torch.load(path, map_location=map_location, weights_only=False)


def read_resume_state(path: str, device: torch.device | str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's learner keys on ``device`` and its training state (``STATE_KEY``) on the host.

    The training state stays where it was written: torch sets RNG and generator states from host byte tensors
    only, NumPy reads its key from the host, and the collector's rows are copied into place from wherever they
    are. Read with ``map_location`` on a GPU they would all be GPU tensors there, and the resume would fail on
    the GPU alone; read here, a resume on the CPU runs the very path a resume on a GPU does.
    """
    checkpoint = read_checkpoint(path)
    state = checkpoint.pop(STATE_KEY, None)
    if state is None:
        raise ValueError(f"{path} has no training state (written before resumes were possible)")
    return _to_device(checkpoint, torch.device(device)), state


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: _to_device(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item, device) for item in value)
    return value


# --- the collector side -----------------------------------------------------------------------------------


def install_collector_safeguards() -> None:
    """In a spawned collector: leave SIGINT/SIGTERM to the learner and die with it.

    A terminal's Ctrl+C or a scheduler's SIGTERM to the whole process group reaches the collector too; the
    learner then finishes its checkpoint and stops the collector through its stop event (or kills it).
    ``PR_SET_PDEATHSIG`` (Linux) makes the kernel send SIGKILL when the learner ends by any means.
    """
    for sig in STOP_SIGNALS:
        with contextlib.suppress(Exception):
            signal.signal(sig, signal.SIG_IGN)
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent or parent == 1:  # the learner ended before the request took effect
        os._exit(1)


def transient_buffers(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A module's non-persistent buffers (not in its state dict), e.g. an actor's held exploration noise."""
    persistent = set(module.state_dict())
    return {name: buf.detach().to("cpu", copy=True) for name, buf in module.named_buffers()
            if name not in persistent and buf is not None}


def load_transient_buffers(module: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Write ``transient_buffers``' values back: in place where the shape matches, else rebound."""
    for name, value in saved.items():
        owner_name, _, leaf = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        live = owner._buffers[leaf]  # noqa: SLF001
        if live is not None and live.shape == value.shape and live.dtype == value.dtype:
            live.copy_(value.to(live.device))
        else:
            owner._buffers[leaf] = value.to(live.device if live is not None else "cpu").clone()  # noqa: SLF001
