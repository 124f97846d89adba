"""A forked run (``forked_runs``) sees what a fresh interpreter sees, and keeps what it changes to itself.

The same probe runs as ``python [-W ignore] PROBE ARGS`` (and as ``python -c``) and forked from a server: its argv,
``sys.path[0]``, working folder, environment, warnings filters, ``__name__`` and ``__file__``, exit status, output
at exit (an atexit handler's) and an uncaught exception's exit status and traceback must be the same; a change
one run makes to a module the server imported is gone in the next run; a run past its time limit ends with
SIGALRM.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from forked_runs import ForkServer

PROBE = '''
import atexit, json, os, sys, warnings
import email.utils


def main() -> None:
    mode = sys.argv[1]
    if mode == "sleep":
        import time
        time.sleep(30)
    if mode == "raise":
        raise RuntimeError("the probe's own error")
    seen = {"argv": sys.argv[1:], "path0": sys.path[0], "cwd": os.getcwd(), "env": os.environ.get("FORKED_PROBE"),
            "filters": [str(f[0]) for f in warnings.filters[:1]], "name": __name__,
            "file": globals().get("__file__"), "patched_before": hasattr(email.utils, "forked_probe_mark")}
    email.utils.forked_probe_mark = True
    atexit.register(lambda: print("at exit", flush=True))
    print(json.dumps(seen))
    sys.exit(3)


print("the top level, also in the server")
if __name__ == "__main__":
    main()
'''


def _fresh(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-W", "ignore", *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def test_a_forked_run_sees_what_a_fresh_interpreter_sees(tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = dict(os.environ, FORKED_PROBE="set")
    by_script = ForkServer(("email.utils",), env=env, cwd=tmp_path, script=script, flags=("-W", "ignore"))
    by_code = ForkServer(("email.utils",), env=env, cwd=tmp_path, flags=("-W", "ignore"))
    try:
        for forked, fresh in ((by_script.run("plain", "x y"), _fresh([str(script), "plain", "x y"], tmp_path, env)),
                              (by_code.run("plain", code=PROBE), _fresh(["-c", PROBE, "plain"], tmp_path, env))):
            assert forked[0] == fresh[0] == 3, (forked, fresh)
            assert forked[1] == fresh[1], (forked[1], fresh[1])
            seen = json.loads(forked[1].splitlines()[1])
            assert seen["env"] == "set" and seen["filters"] == ["ignore"] and seen["name"] == "__main__", seen
            assert forked[1].splitlines()[2] == "at exit"
        # What the first run marked on a module the server imported is not there for the next.
        assert json.loads(by_script.run("again")[1].splitlines()[1])["patched_before"] is False
        raised, fresh_raised = by_script.run("raise"), _fresh([str(script), "raise"], tmp_path, env)
        assert raised[0] == fresh_raised[0] == 1
        assert raised[2].strip().splitlines()[-1] == fresh_raised[2].strip().splitlines()[-1] == (
            "RuntimeError: the probe's own error")
        assert by_script.run("sleep", timeout=1)[0] == -signal.SIGALRM
    finally:
        by_script.close()
        by_code.close()
