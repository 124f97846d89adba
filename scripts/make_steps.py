"""Named, timed steps for the Makefile: `make apply` on a fresh machine installs the stack for minutes, so each
step says what it is doing when it starts and how long it took when it ends, and `summary` lists them at the end.

    python3 scripts/make_steps.py run [--log FILE] NAME -- COMMAND...   # the command's own output streams through
    python3 scripts/make_steps.py summary --log FILE TITLE              # prints the steps of FILE, then deletes it

Standard library only: the first step creates the venv, so this runs on the system python3. Output whose reader
has gone (`make status | head -1`) is dropped: a step still runs and keeps its exit code.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def say(text: str) -> None:
    """Print a line for the person watching; once the reader has closed the pipe, drop this line and the rest:
    the lines only frame the steps, so a closed pipe must neither fail a step nor print a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python exits


def _record(log: Path, name: str, seconds: float, code: int) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"step": name, "seconds": round(seconds, 2), "exit": code}) + "\n")


def summary(log: Path, title: str) -> list[str]:
    """The steps recorded in log, one line each, under a total; the log is removed (it belongs to one make run)."""
    steps = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()] if log.is_file() else []
    log.unlink(missing_ok=True)
    failed = [s for s in steps if s["exit"] != 0]
    total = sum(s["seconds"] for s in steps)
    width = max((len(s["step"]) for s in steps), default=0)
    lines = [f"{title}: {'FAILED' if failed else 'done'} in {duration(total)}"]
    for step in steps:
        failure = f"  (exit {step['exit']})" if step["exit"] != 0 else ""
        lines.append(f"  {step['step']:<{width}}  {duration(step['seconds']):>12}{failure}")
    return lines


def run(name: str, command: list[str], log: Path | None) -> int:
    """Run command with its output passed through, framed by the step's name and duration."""
    say(f"==> {name}")
    start = time.monotonic()
    try:
        code = subprocess.run(command, check=False).returncode
    except OSError as exc:
        print(f"make_steps: cannot run {command[0]}: {exc}", file=sys.stderr)
        code = 127
    seconds = time.monotonic() - start
    say(f"<== {name}: {'done' if code == 0 else f'FAILED (exit {code})'} in {duration(seconds)}")
    if log is not None:
        _record(log, name, seconds, code)
        if code != 0:
            say("\n".join(summary(log, "steps so far")))
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make_steps", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--log", type=Path, help="record the step here for a later summary")
    r.add_argument("name")
    r.add_argument("argv", nargs=argparse.REMAINDER)
    s = sub.add_parser("summary")
    s.add_argument("--log", type=Path, required=True)
    s.add_argument("title")
    args = parser.parse_args(argv)
    if args.command == "summary":
        say("\n".join(summary(args.log, args.title)))
        return 0
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not command:
        parser.error("run: no command after --")
    return run(args.name, command, args.log)


if __name__ == "__main__":
    sys.exit(main())
