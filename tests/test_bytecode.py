"""CPU tests of the setup's bytecode compile (scripts/offline/bytecode.py): what it compiles is what Python then
imports without compiling, a stale file is compiled again, and a folder it cannot write to is named."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import PROJECT

sys.path.insert(0, str(PROJECT / "scripts"))

from offline import bytecode  # noqa: E402

#: Imports ``pkg.a`` under PYTHONDONTWRITEBYTECODE=1 and prints the files Python compiled from source to do so.
COUNT_SOURCE_COMPILES = """
import importlib._bootstrap_external as loader, json, sys
compiled = []
original = loader.SourceLoader.source_to_code
def counting(self, data, path, *args, **kwargs):
    compiled.append(path)
    return original(self, data, path, *args, **kwargs)
loader.SourceLoader.source_to_code = counting
sys.path.insert(0, sys.argv[1])
import pkg.a
print(json.dumps(sorted(compiled)))
"""


def package(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "a.py").write_text("from pkg import VALUE\nDOUBLE = 2 * VALUE\n")
    (root / "pkg" / "legacy.py").write_text('print "Python 2 source, never imported"\n')
    return root


def source_compiles(root: Path, **env: str) -> list[str]:
    full_env = {key: value for key, value in os.environ.items() if key != "PYTHONPYCACHEPREFIX"}
    full_env.update(PYTHONDONTWRITEBYTECODE="1", **env)
    proc = subprocess.run([sys.executable, "-c", COUNT_SOURCE_COMPILES, str(root)], env=full_env,
                          capture_output=True, text=True, check=True)
    return [Path(p).name for p in json.loads(proc.stdout)]


def test_compiled_packages_import_without_compiling(tmp_path: Path) -> None:
    root = package(tmp_path / "site")
    # negative control: without bytecode, every import compiles its source, and nothing keeps the result
    assert source_compiles(root) == ["__init__.py", "a.py"]
    assert source_compiles(root) == ["__init__.py", "a.py"]
    result = bytecode.compile_roots([root], workers=1)
    assert (result.compiled, result.current, result.not_source, result.unwritable) == (2, 0, 1, 0), result
    assert source_compiles(root) == []
    again = bytecode.compile_roots([root], workers=1)
    assert (again.compiled, again.current, again.not_source) == (0, 2, 1), again
    # a changed source makes its .pyc stale: compiled again, then imported from bytecode again
    (root / "pkg" / "a.py").write_text("from pkg import VALUE\nDOUBLE = VALUE + VALUE\n")
    assert source_compiles(root) == ["a.py"]
    stale = bytecode.compile_roots([root], workers=2)
    assert (stale.compiled, stale.current) == (1, 1), stale
    assert source_compiles(root) == []
    assert "2 files compiled" not in stale.line() and "1 files compiled, 1 already current" in stale.line()


def test_a_pycache_prefix_is_honoured_and_an_unwritable_one_named(tmp_path: Path) -> None:
    root = package(tmp_path / "site")
    prefix = tmp_path / "pycache"
    run = [sys.executable, "-c", "import sys; from pathlib import Path; from offline import bytecode; "
           "print(bytecode.compile_roots([Path(sys.argv[1])], workers=1).line())", str(root)]
    env = {**os.environ, "PYTHONPATH": str(PROJECT / "scripts"), "PYTHONPYCACHEPREFIX": str(prefix)}
    proc = subprocess.run(run, env=env, capture_output=True, text=True, check=True)
    assert "2 files compiled" in proc.stdout and "could not be written" not in proc.stdout, proc.stdout
    assert not list(root.rglob("*.pyc")) and len(list(prefix.rglob("*.pyc"))) == 2
    assert source_compiles(root, PYTHONPYCACHEPREFIX=str(prefix)) == []
    assert source_compiles(root) == ["__init__.py", "a.py"]  # control: the prefix's bytecode is only used there
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    proc = subprocess.run(run, env={**env, "PYTHONPYCACHEPREFIX": str(blocked)}, capture_output=True, text=True,
                          check=True)
    assert "0 files compiled" in proc.stdout and "2 could not be written" in proc.stdout, proc.stdout


def test_host_roots_are_the_private_site_and_the_interpreters_site_packages(tmp_path: Path) -> None:
    import site

    roots = bytecode.host_roots(tmp_path)
    assert roots[0] == tmp_path
    assert {Path(p).resolve() for p in site.getsitepackages() if Path(p).is_dir()} <= {r.resolve() for r in roots}
    assert Path(importlib.util.find_spec("torch").origin).resolve().is_relative_to(  # type: ignore[arg-type]
        next(r for r in roots if (r / "torch").is_dir()).resolve())
    assert bytecode.host_roots(tmp_path / "missing")[0] != tmp_path / "missing"
