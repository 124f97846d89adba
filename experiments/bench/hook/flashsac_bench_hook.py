"""Learner-side timing hook for the FlashSAC training benchmark (runs inside the trainer).

Why a hook rather than TensorBoard parsing: the real off-policy runner already hands
every iteration's timings to ``uni_rl.logging.offpolicy.OffPolicyLogger.log_step`` as
keyword arguments, and the logger itself knows the collector cycle
(``_get_collector_cycle_ms``). Wrapping that one method records the same numbers the
Rich panel and TensorBoard show, per iteration, without depending on a TensorBoard
reader or on the logger backend being enabled, and without touching UniLab or uni_rl.

Use as a launcher, in place of ``python <train_flashsac.py> <overrides>``::

    python -m flashsac_bench_hook <path/to/train_flashsac.py> <hydra overrides...>

It installs the wrapper and then executes the real entry script as ``__main__`` (so
Hydra resolves its config relative to the script, and spawned collectors re-import
the entry script, not this launcher). Records go, one JSON object per line, to the
file named by ``FLASHSAC_BENCH_TIMINGS``:

* ``{"kind": "meta", ...}`` once, at the first logged iteration: torch/GPU, where
  ``uni_rl`` and ``unilab`` were imported from, distribution versions, the data-parallel
  NCCL transport chosen (``dp_nccl_transport``; None for a single rank), the collector
  the learner's runtime manifest names (``collector``; None: the host runners name none);
* ``{"kind": "phase", "name": ..., "start_s": ..., "end_s": ...}`` when a start-up phase ends (the first call
  of a function the runner makes anyway: ``startup_phases``), in seconds since this hook was imported;
* ``{"kind": "iteration", "step": ..., "learner_train_ms": ..., ...}`` per iteration;
* ``{"kind": "end", ...}`` when the entry returns or raises: Dynamo compile-time
  counters and the sha256 of every ``uni_rl`` module the learner loaded.

Both runners log through the same method: the host ``DoubleBufferOffPolicyRunner``, whose
collector process reports its cycle phases, and the device-resident ``DeviceCollectorRunner``
(``training.collector=device``), which steps the env in the learner's process and hands
``log_step`` its own iteration split (``collector_timing_ms``: action sampling, env step, ...,
learner), its collection time (``collector_wait_time``), its action sampling
(``inference_time``) and its host syncs (``metrics["collector/host_syncs_per_iteration"]``).
The logger derives no collector cycle from that split (its cycle is the host collector's
phases), so for an in-process collector the hook takes the cycle from what the runner handed
over: action sampling + collection, the part of the iteration that steps the env.

This file must only import the standard library at module level (``startup_phases``, beside it, is
standard library only too): it is imported before the trainer, and must not change which ``uni_rl``
gets imported.

Started by ``benchmark_flashsac_training.py`` (``python -m flashsac_bench_hook``, with this folder,
``bench_env.HOOK_DIR``, on the trainer's ``PYTHONPATH``).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import runpy
import sys
import time
from pathlib import Path
from typing import Any, Callable

import startup_phases

ENV_TIMINGS = "FLASHSAC_BENCH_TIMINGS"
_T0 = time.perf_counter()
_INSTALLED_ATTR = "_flashsac_bench_hook_original"
#: Distributions whose versions every run records (pins live in VERSIONS.env).
DISTRIBUTIONS = ("unilab", "unilab-rl", "unisim-core", "mujoco", "torch", "mujoco-warp", "warp-lang")


class _Sink:
    """Append-only JSON-lines writer; flushes each record so a crash loses nothing."""

    def __init__(self, path: str) -> None:
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process

    def write(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, default=_json_default) + "\n")
        self._fh.flush()


def _json_default(value: Any) -> Any:
    """Tensors and numpy scalars that reach log_step become plain floats."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return repr(value)


_sink: _Sink | None = None
_meta_written = False


def _sha256(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _distribution_versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _dp_nccl_transport() -> Any:
    """The data-parallel NCCL transport this rank chose (uni_rl 0009), or None: a single rank chooses none."""
    transport = sys.modules.get("flashsac_runtime.dp_transport")
    raw = os.environ.get(transport.RECORD_ENV) if transport is not None else None
    return json.loads(raw) if raw else None


#: The metric the device-resident runner logs its host syncs of an iteration under.
HOST_SYNCS_METRIC = "collector/host_syncs_per_iteration"


def _runtime_manifest(logger: Any) -> dict[str, Any]:
    """The learner's runtime manifest as its logger holds it (the runner sets it before the first iteration)."""
    manifest = getattr(logger, "_runtime_manifest", None)
    return manifest if isinstance(manifest, dict) else {}


def _meta_record(logger: Any) -> dict[str, Any]:
    """What the learner process really ran with, read inside that process."""
    record: dict[str, Any] = {"kind": "meta", "pid": os.getpid(), "executable": sys.executable}
    record["collector"] = _runtime_manifest(logger).get("collector")
    uni_rl = sys.modules.get("uni_rl")
    unilab = sys.modules.get("unilab")
    record["flashsac_source"] = str(Path(uni_rl.__file__).parent) if uni_rl and uni_rl.__file__ else None
    record["uni_rl_version_attr"] = getattr(uni_rl, "__version__", None)
    record["unilab_source"] = str(Path(unilab.__file__).parent) if unilab and unilab.__file__ else None
    record["package_versions"] = _distribution_versions()
    record["dp_nccl_transport"] = _dp_nccl_transport()
    try:
        import torch

        record["torch"] = torch.__version__
        record["cuda_runtime"] = torch.version.cuda
        if torch.cuda.is_available():
            index = torch.cuda.current_device()
            record["gpu"] = torch.cuda.get_device_name(index)
            record["capability"] = list(torch.cuda.get_device_capability(index))
    except Exception as exc:  # the record must not kill a training run
        record["device_error"] = f"{type(exc).__name__}: {exc}"
    return record


def _optional_float(value: Any, scale: float = 1.0) -> float | None:
    if value is None:
        return None
    try:
        return float(value) * scale
    except (TypeError, ValueError):
        return None


def _iteration_record(logger: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """One row: the values the logger just received plus those it derives itself."""
    iter_ms: float | None = None
    getter: Callable[[], float] | None = getattr(logger, "_get_iter_wall_time", None)
    if getter is not None:
        iter_ms = _optional_float(getter(), 1000.0)
    if iter_ms is None:
        iter_ms = _optional_float(arguments.get("iteration_time"), 1000.0)
    cycle: Callable[[], float | None] | None = getattr(logger, "_get_collector_cycle_ms", None)
    collector_cycle_ms = _optional_float(cycle()) if cycle is not None else None
    if collector_cycle_ms is None and _runtime_manifest(logger).get("collector_process") is False:
        # In-process collector: the env-stepping part of its iteration, as its runner handed it over.
        collected = [_optional_float(arguments.get(k), 1000.0) for k in ("inference_time", "collector_wait_time")]
        collector_cycle_ms = None if None in collected else sum(v for v in collected if v is not None)
    collector_timing = getattr(logger, "_collector_timing", None)
    metrics = arguments.get("metrics")
    return {
        "kind": "iteration",
        "step": int(arguments["iteration"]),
        "learner_train_ms": _optional_float(arguments.get("train_time"), 1000.0),
        "collector_cycle_ms": collector_cycle_ms,
        "iter_ms": iter_ms,
        "reward": _optional_float(arguments.get("reward")),
        "collector_wait_ms": _optional_float(arguments.get("collector_wait_time"), 1000.0),
        "replay_batch_wait_ms": _optional_float(arguments.get("replay_batch_wait_time"), 1000.0),
        "replay_sample_ms": _optional_float(arguments.get("learner_replay_sample_time"), 1000.0),
        "inference_ms": _optional_float(arguments.get("inference_time"), 1000.0),
        "collector_timing_ms": dict(collector_timing) if isinstance(collector_timing, dict) else None,
        "host_syncs": _optional_float(metrics.get(HOST_SYNCS_METRIC)) if isinstance(metrics, dict) else None,
        "wall_s": time.perf_counter() - _T0,
    }


def install() -> bool:
    """Wrap ``OffPolicyLogger.log_step`` once; returns False when no sink is configured."""
    global _sink
    path = os.environ.get(ENV_TIMINGS)
    if not path:
        return False
    from uni_rl.logging.offpolicy import OffPolicyLogger

    if hasattr(OffPolicyLogger.log_step, _INSTALLED_ATTR):
        return True
    _sink = _Sink(path)
    startup_phases.install(_sink.write, lambda: time.perf_counter() - _T0)
    original = OffPolicyLogger.log_step
    signature = inspect.signature(original)

    def log_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        global _meta_written
        result = original(self, *args, **kwargs)
        try:
            bound = signature.bind(self, *args, **kwargs)
            bound.apply_defaults()
            assert _sink is not None
            if not _meta_written:
                _sink.write(_meta_record(self))
                _meta_written = True
            _sink.write(_iteration_record(self, dict(bound.arguments)))
        except Exception as exc:  # never break training for a measurement
            print(f"[flashsac_bench_hook] could not record iteration: {exc!r}", file=sys.stderr)
        return result

    setattr(log_step, _INSTALLED_ATTR, original)
    log_step.__doc__ = original.__doc__
    OffPolicyLogger.log_step = log_step  # type: ignore[method-assign]
    return True


def _compile_metrics() -> dict[str, Any]:
    """Torch's own compile-time counters (seconds per phase), when torch recorded any, and this process's compiles
    graph by graph (``frames``: the patched ``flashsac_runtime.learner.compile_record``; None with a uni_rl without it)."""
    torch_mod = sys.modules.get("torch")
    if torch_mod is None:
        return {}
    try:
        from torch._dynamo import utils as dynamo_utils

        metrics = getattr(dynamo_utils, "compilation_time_metrics", {})
        totals = {str(k): float(sum(v)) for k, v in metrics.items() if v}
        counts = {str(k): len(v) for k, v in metrics.items() if v}
        stats: dict[str, Any] = dict(dynamo_utils.counters.get("stats", {}))  # type: ignore[call-overload]
        unique_graphs = stats.get("unique_graphs")
        try:
            from flashsac_runtime.learner.compile_record import frame_compiles
        except ImportError:  # unpatched uni_rl
            frames = None
        else:
            frames = frame_compiles()
        return {"phase_total_s": totals, "phase_calls": counts, "unique_graphs": unique_graphs, "frames": frames}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def _loaded_uni_rl_modules() -> list[dict[str, Any]]:
    modules = []
    for name, module in sorted(sys.modules.items()):
        if name != "uni_rl" and not name.startswith("uni_rl."):
            continue
        file = getattr(module, "__file__", None)
        if file:
            modules.append({"name": name, "file": file, "sha256": _sha256(file)})
    return modules


def write_end(status: str, error: str | None = None) -> None:
    """Final record; the driver uses it to tell a finished trainer from a killed one."""
    if _sink is None:
        return
    _sink.write(
        {
            "kind": "end",
            "status": status,
            "error": error,
            "pid": os.getpid(),
            "wall_s": time.perf_counter() - _T0,
            "dynamo": _compile_metrics(),
            "uni_rl_modules": _loaded_uni_rl_modules(),
        }
    )


def main(argv: list[str]) -> int:
    """Install the hook, then run the real entry script exactly as ``python script args``."""
    if not argv:
        print("usage: python -m flashsac_bench_hook <train_script.py> [overrides...]", file=sys.stderr)
        return 2
    script = str(Path(argv[0]).resolve())
    if not install():
        print(f"[flashsac_bench_hook] {ENV_TIMINGS} is not set; nothing will be recorded", file=sys.stderr)
    sys.argv = [script, *argv[1:]]
    sys.path[0] = str(Path(script).parent)
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        write_end("completed" if code == 0 else "failed", None if code == 0 else f"SystemExit({exc.code!r})")
        raise
    except BaseException as exc:
        write_end("failed", f"{type(exc).__name__}: {exc}")
        raise
    write_end("completed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
