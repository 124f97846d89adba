"""Python bytecode for the packages a training run imports, compiled once when the host is set up.

Why: Python compiles a module's source to bytecode at import unless a current ``.pyc`` sits beside it (or under
``PYTHONPYCACHEPREFIX``), and it keeps the result only where it may write one (not under
``PYTHONDONTWRITEBYTECODE=1``, common in container images, nor in a read-only install). The wheelhouse installs
with ``pip --no-compile``, and a GPU image's torch may ship without bytecode too: on a freshly lent H200 the
learner's construction alone spent 7.7 s compiling 1681 files of ``torch._dynamo``, ``torch._inductor`` and
``sympy`` (``results/2026-12-04-h200-learner-construction/`` in commit f352b4dba6e1), at every launch. pip compiles at install by
default; this does the same for the private site folder and the host interpreter's own site-packages.

A file whose ``.pyc`` is current (the source's modification time and size recorded in its header, Python's own
check) is left alone, so a second call only reads headers. Files that are not Python 3 source (templates,
Python 2 test data some packages carry) cannot be imported either and are counted, not fatal; a folder where the
bytecode cannot be written is named, because there every launch compiles again.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import site
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

_CHUNK = 256  # files per worker task: large enough that the process pool's overhead stays small


@dataclass
class Compiled:
    """What one pass did, per outcome (file counts) and how long it took."""

    roots: list[Path]
    compiled: int = 0
    current: int = 0
    not_source: int = 0
    unwritable: int = 0
    unwritable_example: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        """The one line setup prints."""
        where = ", ".join(str(r) for r in self.roots)
        text = (f"Python bytecode: {self.compiled} files compiled, {self.current} already current, "
                f"{self.not_source} not Python 3 source, in {self.seconds:.1f} s ({where})")
        if self.unwritable:
            text += (f"; {self.unwritable} could not be written (e.g. {self.unwritable_example}): those compile "
                     f"again at every launch unless PYTHONPYCACHEPREFIX names a writable folder, for setup and runs")
        return text


def host_roots(private_site: Path | None) -> list[Path]:
    """The folders to compile: the private site folder (if any) and this interpreter's site-packages (where the
    host's torch lives), each once, existing ones only."""
    candidates = [private_site] if private_site is not None else []
    candidates += [Path(p) for p in site.getsitepackages()]
    candidates += [Path(p) for p in sys.path if Path(p).name in ("site-packages", "dist-packages")]
    roots: list[Path] = []
    for path in candidates:
        if path.is_dir() and path.resolve() not in {r.resolve() for r in roots}:
            roots.append(path)
    return roots


def is_current(source: Path, cached: str) -> bool:
    """Python's own check of a ``.pyc``: its header records the source's mtime and size (or, hash-based, the
    source's hash)."""
    try:
        with open(cached, "rb") as handle:
            header = handle.read(16)
        stat = source.stat()
        if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
            return False
        flags = int.from_bytes(header[4:8], "little")
        if flags & 0b1:  # a hash-based .pyc: current when it records the source's hash
            return header[8:16] == importlib.util.source_hash(source.read_bytes())
    except OSError:
        return False
    mtime = int.from_bytes(header[8:12], "little")
    size = int.from_bytes(header[12:16], "little")
    return mtime == (int(stat.st_mtime) & 0xFFFFFFFF) and size == (stat.st_size & 0xFFFFFFFF)


def _compile_chunk(paths: list[str]) -> tuple[int, int, int, int, str]:
    """compiled, current, not source, unwritable, one unwritable path (in a worker process)."""
    compiled = current = not_source = unwritable = 0
    example = ""
    for name in paths:
        source = Path(name)
        cached = importlib.util.cache_from_source(name)  # honours PYTHONPYCACHEPREFIX
        if is_current(source, cached):
            current += 1
            continue
        try:
            py_compile.compile(name, cfile=cached, doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            compiled += 1
        except py_compile.PyCompileError:
            not_source += 1
        except OSError:
            unwritable += 1
            example = example or cached
    return compiled, current, not_source, unwritable, example


def _sources(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*.py") if p.is_file() and "__pycache__" not in p.parts)


def compile_roots(roots: list[Path], workers: int | None = None) -> Compiled:
    """Compile every ``.py`` under ``roots`` whose bytecode is missing or stale, on ``workers`` processes."""
    started = time.perf_counter()
    result = Compiled(roots=list(roots))
    files: list[str] = []
    for root in roots:
        files += _sources(root)
    chunks = [files[i:i + _CHUNK] for i in range(0, len(files), _CHUNK)]
    workers = max(1, min(workers or os.cpu_count() or 1, len(chunks) or 1))
    if workers == 1:
        outcomes = [_compile_chunk(chunk) for chunk in chunks]
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            outcomes = list(pool.map(_compile_chunk, chunks))
    for compiled, current, not_source, unwritable, example in outcomes:
        result.compiled += compiled
        result.current += current
        result.not_source += not_source
        result.unwritable += unwritable
        result.unwritable_example = result.unwritable_example or example
    result.seconds = time.perf_counter() - started
    return result
