"""Thin command line over applier: parse flags, run one command, print lines (or JSON).

Every failure is one line on stderr and a non-zero exit: refusals, OS errors (disk full, permission denied),
SIGINT/SIGTERM (130/143, after the rollback), a closed output pipe, and, as a last resort, an internal error
(PATCHSET_DEBUG=1 shows its traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from . import applier, port_report, refresh, scratch, signals
from .errors import PatchsetError, os_error_message
from .manifest import build_manifest, write_manifest
from .paths import EDIT_DIR, PATCHES_DIR
from .provenance_check import run_provenance


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0", "false", "no")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="patchset", description=__doc__)
    parser.add_argument("command", choices=["apply", "status", "revert", "manifest", "provenance", "port-report",
                                                "edit", "refresh"])
    parser.add_argument("--unilab", type=Path, help="UniLab checkout (default: the embedded tree from the sdist)")
    parser.add_argument("--overlay", type=Path,
                        help="overlay directory (default: the one the checkout was applied with, else overlay/)")
    parser.add_argument("--patches", type=Path, default=PATCHES_DIR)
    parser.add_argument("--python", help="interpreter command that runs UniLab (default: checkout's uv env, else ours)")
    parser.add_argument("--wheel", type=Path, help="path of the pinned unilab-rl base wheel (else cache/download)")
    parser.add_argument("--sdist", type=Path, help="path of the pinned unilab sdist (else cache/download)")
    parser.add_argument("--unisim-sdist", type=Path,
                        help="path of the pinned unisim-core sdist (else cache/download)")
    parser.add_argument("--allow-version-drift", action="store_true", default=_env_flag("ALLOW_DRIFT"))
    parser.add_argument("--allow-other-commit", action="store_true", default=_env_flag("ALLOW_OTHER_COMMIT"))
    parser.add_argument("--force", action="store_true", default=_env_flag("FORCE"),
                        help="revert even over your edits (saved byte for byte first)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--target", help="port-report: unilab-rl==<version> or unilab==<version> (from PyPI)")
    parser.add_argument("--output", type=Path, help="port-report: directory of the report (results/port-report)")
    parser.add_argument("--dir", type=Path, default=EDIT_DIR,
                        help="edit/refresh: the scratch git repository of the series (default work/series-edit)")
    return parser


def _options(args: argparse.Namespace) -> applier.Options:
    return applier.Options(
        checkout=args.unilab, overlay=args.overlay.resolve() if args.overlay else None,
        patches_dir=args.patches.resolve(),
        python=shlex.split(args.python) if args.python else None,
        allow_version_drift=args.allow_version_drift, allow_other_commit=args.allow_other_commit,
        force=args.force, wheel=args.wheel, sdist=args.sdist, unisim_sdist=args.unisim_sdist,
    )


def _manifest(opts: applier.Options) -> applier.Outcome:
    series, plans = applier.plan_pristine(opts)
    write_manifest(opts.patches_dir, build_manifest(series, plans))
    touched = sum(len(p) for p in plans.values())
    return applier.Outcome([f"wrote {opts.patches_dir / 'MANIFEST.json'}: {len(series.patches)} patches, {touched} files"])


def _scratch_trees(opts: applier.Options) -> dict[str, scratch.Files]:
    return scratch.pristine_trees(opts.sdist, {"uni_rl": opts.wheel, "unisim": opts.unisim_sdist})


def _edit(opts: applier.Options, where: Path) -> applier.Outcome:
    return applier.Outcome(scratch.export(opts.patches_dir, where.resolve(), _scratch_trees(opts)))


def _refresh(opts: applier.Options, where: Path) -> applier.Outcome:
    return applier.Outcome(refresh.refresh(where, opts.patches_dir, _scratch_trees(opts)))


def _fail(command: str, message: str, code: int) -> int:
    print(f"patchset {command}: error: {' '.join(message.split())}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    opts = _options(args)
    signals.install()
    try:
        outcome = {"apply": applier.apply, "status": applier.status, "revert": applier.revert,
                   "manifest": _manifest, "provenance": run_provenance,
                   "port-report": lambda o: applier.Outcome(*port_report.run(args.target, args.output, o.patches_dir)),
                   "edit": lambda o: _edit(o, args.dir), "refresh": lambda o: _refresh(o, args.dir),
                   }[args.command](opts)
        signals.hold()  # the run is over: a signal now must not turn its report into a failure or a traceback
        text = json.dumps(outcome.data, indent=2, sort_keys=True, default=str) if args.json else "\n".join(outcome.lines)
        print(text, flush=True)
    except BaseException as exc:
        signals.hold()  # likewise while the one line is printed
        return _failure(args.command, exc)
    return 0


def _failure(command: str, exc: BaseException) -> int:
    """Print a failed run's one line; returns its exit status."""
    if isinstance(exc, PatchsetError):
        return _fail(command, str(exc), exc.exit_code)
    if isinstance(exc, BrokenPipeError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at interpreter exit
        return _fail(command, "the output pipe was closed before all output was written", 141)
    if isinstance(exc, OSError):
        return _fail(command, os_error_message(exc), 1)
    if not isinstance(exc, Exception) or _env_flag("PATCHSET_DEBUG"):  # SystemExit and the like; or a debug run
        raise exc
    return _fail(command, f"internal error ({type(exc).__name__}: {exc}); PATCHSET_DEBUG=1 shows where", 70)
