"""Many short Python runs, each a process of its own forked from an interpreter that has made their imports once.

Why: the suite's child processes spend most of their start in imports. A run of ``device_env_check.py`` on the
2-core CI machine took about 11 s in a fresh interpreter, of which about 8 s were imports (torch, Warp, MuJoCo
Warp's kernels, UniLab's env); forked from an interpreter that made them once, about 3 s. A snippet against a
``uni_rl`` root spends about 3 s importing torch and the learner.

What a run sees is what a fresh ``python SCRIPT ARGS...`` (or ``python -c CODE ARGS...``) sees after its imports:
the same environment and working folder, interpreter options (``flags``) and ``sys.path[0]`` (the script's folder,
or ``''``); ``__main__`` is the script or the code, run from its first line (its imports are found loaded). What a
run changes (a control's patched method, a generator it draws from, Warp's runtime it initialises) stays in its
own process. The server only imports, so it holds no threads or devices to fork.

The server (``python [FLAGS] forked_runs.py [--script SCRIPT] MODULE...``) imports the script's top level (not its
``__main__`` block: a script keeps its work there) and each MODULE (what the runs import later, such as an env's
backend), then reads one JSON request per line (``argv``; ``code`` for ``-c``; ``stdout``, ``stderr``: file paths;
``timeout``: seconds) and answers each with the run's exit status (a negative number: the signal that ended it, SIGALRM at its timeout).
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import queue
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from pathlib import Path


class ForkServer:
    """Runs forked from servers started with ``env``, ``cwd`` and ``flags`` that imported ``preload`` (and, with
    ``script``, that script's top level); one run at a time per server, another server started when all are busy."""

    def __init__(self, preload: tuple[str, ...], *, env: dict[str, str], cwd: Path | None = None,
                 script: Path | None = None, flags: tuple[str, ...] = ()) -> None:
        self._command = [sys.executable, *flags, __file__, *(("--script", str(script)) if script else ()), *preload]
        self._env, self._cwd, self._script = env, cwd, script
        self._idle: queue.SimpleQueue[subprocess.Popen] = queue.SimpleQueue()
        self._servers: list[subprocess.Popen] = []
        self._lock = threading.Lock()
        self._folder = tempfile.TemporaryDirectory(prefix="forked-runs-")

    def start(self, count: int) -> ForkServer:
        """Start ``count`` servers now, so that their imports overlap whatever the caller does next."""
        for _ in range(count):
            self._idle.put(self._start())
        return self

    def _start(self) -> subprocess.Popen:
        server = subprocess.Popen(self._command, cwd=self._cwd, env=self._env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        with self._lock:
            self._servers.append(server)
        return server

    def run(self, *args: str, code: str | None = None, timeout: int = 900) -> tuple[int, str, str]:
        """One run (the server's script, or ``code`` as ``-c``) with ``args``: its exit status, stdout and stderr."""
        assert (code is None) != (self._script is None), "a run is the server's script or code, not both"
        try:
            server = self._idle.get_nowait()
        except queue.Empty:
            server = self._start()
        try:
            with tempfile.NamedTemporaryFile("r", dir=self._folder.name) as out, \
                    tempfile.NamedTemporaryFile("r", dir=self._folder.name) as err:
                assert server.stdin is not None and server.stdout is not None
                server.stdin.write(json.dumps({"argv": list(args), "code": code, "stdout": out.name,
                                               "stderr": err.name, "timeout": timeout}) + "\n")
                server.stdin.flush()
                answer = server.stdout.readline()
                if not answer:
                    raise RuntimeError(f"a fork server ({' '.join(self._command[1:])}) ended: exit {server.wait()}")
                return int(answer), Path(out.name).read_text(), Path(err.name).read_text()
        finally:
            self._idle.put(server)

    def close(self) -> None:
        with self._lock:
            servers, self._servers = self._servers, []
        for server in servers:
            assert server.stdin is not None
            server.stdin.close()
            server.wait(timeout=60)
        self._folder.cleanup()


def _run_forked(script: str | None, request: dict) -> int:
    """In the forked child: the script or the code as ``__main__``, with the request's argv, files and time limit."""
    out = os.open(request["stdout"], os.O_WRONLY | os.O_TRUNC)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_TRUNC)
    os.dup2(out, 1)
    os.dup2(err, 2)
    signal.alarm(int(request["timeout"]))
    code = 0
    try:
        if script is None:
            sys.argv = ["-c", *request["argv"]]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(request["code"], "<string>", "exec"), main.__dict__)  # noqa: S102 - what `python -c` runs
        else:
            sys.argv = [script, *request["argv"]]
            runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - what an uncaught exception does in a fresh interpreter
        traceback.print_exc()
        code = 1
    # What a fresh interpreter does at its end, short of tearing down every module (seconds with torch loaded):
    # wait for the threads it started, run the exit handlers, flush.
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # noqa: SLF001 - the interpreter's own exit step
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(argv: list[str]) -> None:
    script = argv[1] if argv[:1] == ["--script"] else None
    preload = argv[2:] if script else argv
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the imports print goes to stderr, not into the answers
    sys.path[0] = str(Path(script).resolve().parent) if script else ""  # as `python SCRIPT` or `python -c` has it
    if script:
        runpy.run_path(script, run_name="__forked_runs_preload__")
    for name in preload:
        importlib.import_module(name)
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os._exit(_run_forked(script, request))
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), file=answers, flush=True)


if __name__ == "__main__":
    serve(sys.argv[1:])
