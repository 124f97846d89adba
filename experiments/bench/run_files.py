#!/usr/bin/env python3
"""Run JSONs on disk: the one reader (``read_json``) and the one writer (``write_run``) of every run file.

A bench run JSON carries every logged iteration (``rows_all``, ~3000 rows of ~20 numbers) and, besides, copies of
parts of it. The compact form stores each thing once and is what the bench writes and results/ keeps:

- ``rows`` (the summary window) is left out when it equals ``bench_stats.select_summary_rows(rows_all, ...)``;
- ``reward`` (the reward column) is left out when it equals ``[row.get("reward") for row in rows_all]``;
- each row's ``wall_per_iter_ms`` is left out when ``bench_stats.with_wall_periods`` gives it back exactly;
- ``rows_all`` is stored by column: ``{"n": rows, "columns": {key: {"values": [...]}}}`` (a nested dict such as
  ``collector_timing_ms`` as ``{"dicts": <columns>}``; ``"rows": [...]`` lists the rows that have a key where not
  all do);
- ``stored_compact`` records the format, the top-level key order and what was left out.

``read_json`` gives back the run as it was written, every key in its order (``compact`` refuses a run it cannot
give back exactly, and keeps that run whole). Committed evidence is ``<name>.json.xz`` (xz of the compact JSON);
``<name>.json`` and ``<name>.json.gz`` are read too, and a recorded path whose file is now stored under another
of these suffixes is found (``resolve``). ``python experiments/bench/run_files.py store FILE...`` converts files
in place, checking each against its original before the original is removed.
"""

from __future__ import annotations

import argparse
import copy
import gzip
import json
import lzma
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_stats  # noqa: E402

FORMAT = 1
MARKER = "stored_compact"
#: Suffixes of a run file, plain first; committed runs are ``.json.xz``.
SUFFIXES = (".json", ".json.gz", ".json.xz")
STORED = ".json.xz"


def logical_name(path: Path) -> str:
    """The file's name as a plain JSON (``x.json`` for ``x.json``, ``x.json.gz`` and ``x.json.xz``)."""
    name = path.name
    for suffix in (".gz", ".xz"):
        if name.endswith(".json" + suffix):
            return name.removesuffix(suffix)
    return name


def resolve(path: Path) -> Path:
    """``path``, or the same run stored under another suffix when ``path`` itself is not there."""
    if path.exists():
        return path
    stem = path.parent / logical_name(path)
    for candidate in (stem.with_name(stem.name + s.removeprefix(".json")) for s in SUFFIXES):
        if candidate.exists():
            return candidate
    return path


def json_files(folder: Path, pattern: str = "*", *, recursive: bool = False) -> list[Path]:
    """JSON files of ``folder`` matching ``pattern`` (without its suffix) in any stored form, sorted by path."""
    glob = folder.rglob if recursive else folder.glob
    return sorted(p for s in SUFFIXES for p in glob(pattern + s))


def _columns(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    keys = list(dict.fromkeys(key for row in rows for key in row))
    columns: dict[str, Any] = {}
    for key in keys:
        present = [i for i, row in enumerate(rows) if key in row]
        values = [rows[i][key] for i in present]
        column: dict[str, Any] = ({"dicts": _columns(values)} if values and all(isinstance(v, dict) for v in values)
                                  else {"values": values})
        if len(present) != len(rows):
            column["rows"] = present
        columns[key] = column
    return {"n": len(rows), "columns": columns}


def _rows(table: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{} for _ in range(table["n"])]
    for key, column in table["columns"].items():
        values = _rows(column["dicts"]) if "dicts" in column else column["values"]
        for i, value in zip(column.get("rows", range(table["n"])), values, strict=True):
            rows[i][key] = value
    return rows


def _summary_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    return copy.deepcopy(bench_stats.select_summary_rows(run["rows_all"], summary_last=run["summary_last"],
                                                         skip_first=run.get("skip_first", 0)))


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=2, allow_nan=True)


def expand(data: Any) -> Any:
    """A run as it was written, from its compact form (anything else is returned as it is)."""
    if not isinstance(data, dict) or MARKER not in data:
        return data
    data = dict(data)
    record = data.pop(MARKER)
    if record.get("format") != FORMAT:
        raise ValueError(f"unknown compact run format {record.get('format')!r}")
    left_out = set(record["left_out"])
    rows_all = _rows(data["rows_all"])
    if "wall_per_iter_ms" in left_out:
        rows_all = bench_stats.with_wall_periods(rows_all)
    data["rows_all"] = rows_all
    if "reward" in left_out:
        data["reward"] = [row.get("reward") for row in rows_all]
    if "rows" in left_out:
        data["rows"] = _summary_rows(data)
    return {key: data[key] for key in record["keys"]}


def compact(run: Any) -> Any:
    """The compact form of a run JSON (a run it cannot give back exactly, or no run, is returned as it is)."""
    if not isinstance(run, dict) or MARKER in run or not isinstance(run.get("rows_all"), list) or not all(
            isinstance(row, dict) for row in run["rows_all"]):
        return run
    out = dict(run)
    left_out = []
    rows_all = run["rows_all"]
    if "rows" in run and isinstance(run.get("summary_last"), int) and run["summary_last"] > 0:
        if _dumps(_summary_rows(run)) == _dumps(run["rows"]):
            left_out.append("rows")
            del out["rows"]
    if "reward" in run and _dumps([row.get("reward") for row in rows_all]) == _dumps(run["reward"]):
        left_out.append("reward")
        del out["reward"]
    stored_rows = rows_all
    if rows_all and all("wall_per_iter_ms" in row and list(row)[-1] == "wall_per_iter_ms" for row in rows_all):
        bare = [{k: v for k, v in row.items() if k != "wall_per_iter_ms"} for row in rows_all]
        if _dumps(bench_stats.with_wall_periods(bare)) == _dumps(rows_all):
            left_out.append("wall_per_iter_ms")
            stored_rows = bare
    out["rows_all"] = _columns(stored_rows)
    out[MARKER] = {"format": FORMAT, "keys": list(run), "left_out": left_out}
    if _dumps(expand(json.loads(_dumps(out)))) != _dumps(run):
        return run
    return out


def decode(raw: bytes, name: str) -> Any:
    """The JSON in ``raw``, stored as ``name`` (plain, ``.gz`` or ``.xz``), as it was written."""
    if name.endswith(".gz"):
        raw = gzip.decompress(raw)
    elif name.endswith(".xz"):
        raw = lzma.decompress(raw)
    return expand(json.loads(raw))


def read_json(path: Path) -> Any:
    """The one reader of run files: a JSON file in any stored form (``resolve``), expanded."""
    path = resolve(Path(path))
    return decode(path.read_bytes(), path.name)


def encode(data: Any, name: str) -> bytes:
    """The bytes of ``data`` in its compact form, stored as ``name`` (plain, ``.gz`` or ``.xz``)."""
    text = (_dumps(compact(data)) + "\n").encode("utf-8")
    if name.endswith(".gz"):
        return gzip.compress(text, 9, mtime=0)
    if name.endswith(".xz"):
        return lzma.compress(text, preset=9 | lzma.PRESET_EXTREME)
    return text


def write_run(path: Path, data: Any) -> Path:
    """The one writer of run files: ``data`` in its compact form at ``path`` (compressed by its suffix)."""
    path = Path(path)
    path.write_bytes(encode(data, path.name))
    return path


def store(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """Convert run files to ``<name>.json.xz`` (compact where ``compact`` can give the run back exactly, else
    whole): each new file must read back equal to its original before the original is removed; files that are not
    runs are left alone. Returns (original, stored) pairs."""
    done = []
    for path in paths:
        original = path.read_bytes()
        data = decode(original, path.name)
        if not (isinstance(data, dict) and isinstance(data.get("rows_all"), list)):  # not a run
            continue
        target = path.parent / (logical_name(path) + ".xz")
        stored = encode(data, target.name)
        if _dumps(decode(stored, target.name)) != _dumps(decode(original, path.name)):
            raise ValueError(f"{path}: the compact form does not read back equal; left as it is")
        target.write_bytes(stored)
        if target != path:
            path.unlink()
        done.append((path, target))
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    store_cmd = sub.add_parser("store", help="convert run files to the compact .json.xz, checked against each original")
    store_cmd.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args(argv)
    files = [p for arg in args.paths for p in (json_files(arg, recursive=True) if arg.is_dir() else [arg])]
    try:
        for original, target in store(files):
            print(f"{original} -> {target.name}")
    except (OSError, ValueError) as exc:
        print(f"run_files: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
