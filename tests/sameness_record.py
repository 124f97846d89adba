"""Keeps the sameness record's entries for the project's own package in step with runtime/.

Why: tests/data/series-3acca94a9d68.json proves that the curated series and runtime/flashsac_runtime give exactly
the trees of the series they replaced, but for the texts it lists. Each module the series once added as a new file
and that now lives in runtime/ is listed under ``moved`` with ``amended``: ``[text now, text then]`` pairs that,
applied in order (each ``now`` found exactly once), turn the module as runtime/ holds it back into the file the old
series had. Any edit of such a module breaks tests/test_series_prefixes.py until its pairs say what changed; writing
those pairs by hand is slow and easy to get wrong. This tool writes them.

``amend --why "..."`` (``.venv/bin/python tests/sameness_record.py amend --why "..."``):

- finds each moved module's old text: the recorded pairs applied to the module as runtime/ holds it, else (the
  module edited since) to the module and the record as ``git show HEAD:`` has them, else a dropped module's
  recorded text; every candidate is checked against the sha256 of that file in the record's applied trees
  (``applied[target]["post"]``), so the old text is exactly the recorded file or the tool stops with one line;
- for a module whose recorded pairs no longer give that text, writes new pairs: difflib's line opcodes between the
  module now and then, each widened by one line of context on both sides until its ``now`` is non-empty and occurs
  exactly once, where it belongs, in the text the pairs before it left (touching pairs merge);
- for a module runtime/ no longer holds, records its whole old text under ``dropped`` (``{"text", "why"}``) in
  place of its pairs;
- appends the why to ``why_amended`` (once: the same why given again is not repeated). Modules whose pairs still
  hold are left as they are.

``--only PACKAGE_PATH`` (repeatable) limits the update to those modules (e.g. ``flashsac_runtime/envs/g1_walk.py``),
so that an edit in progress elsewhere in runtime/ is not recorded with yours. ``check`` verifies every moved
module's reconstruction against the record without writing (exit 1 and one line per module that fails).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

PROJECT = Path(__file__).resolve().parents[1]
RECORD_PATH = PROJECT / "tests" / "data" / "series-3acca94a9d68.json"
RUNTIME = PROJECT / "runtime"

#: ``[text now, text then]``: ``now`` occurs once in the module as runtime/ holds it (after the pairs before it).
Pair = list[str]


class RecordError(Exception):
    """A module whose old text cannot be found or whose pairs cannot be made unique: one line for the user."""


def dump(record: dict[str, Any]) -> str:
    """The record's text as committed (one-space indent, sorted keys, a final newline)."""
    return json.dumps(record, indent=1, sort_keys=True) + "\n"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def apply_pairs(text: str, pairs: list[Pair]) -> str | None:
    """``text`` with each pair's ``now`` replaced by its ``then``, in order, as the sameness test applies them;
    None where a ``now`` does not occur exactly once."""
    for new, old in pairs:
        if text.count(new) != 1:
            return None
        text = text.replace(new, old)
    return text


def pairs_for(now: str, then: str) -> list[Pair]:
    """Minimal pairs turning ``now`` into ``then`` under ``apply_pairs``: line opcodes, widened with context until
    each ``now`` is non-empty and found exactly once, at its own place, in the text the pairs before it left."""
    a, b = now.splitlines(keepends=True), then.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    hunks = [[i1, i2, j1, j2] for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "equal"]
    starts = [0]
    for line in a:
        starts.append(starts[-1] + len(line))
    while True:
        merged: list[list[int]] = []
        for hunk in hunks:  # the lines between two hunks are equal on both sides: touching hunks join
            if merged and hunk[0] <= merged[-1][1]:
                merged[-1] = [merged[-1][0], max(merged[-1][1], hunk[1]), merged[-1][2], max(merged[-1][3], hunk[3])]
            else:
                merged.append(list(hunk))
        hunks = merged
        pairs = [["".join(a[i1:i2]), "".join(b[j1:j2])] for i1, i2, j1, j2 in hunks]
        text, shift, bad = now, 0, None
        for k, ((new, old), (i1, _, _, _)) in enumerate(zip(pairs, hunks, strict=True)):
            if not new or text.count(new) != 1 or text.find(new) != starts[i1] + shift:
                bad = k
                break
            text = text.replace(new, old)
            shift += len(old) - len(new)
        if bad is None:
            if text != then:  # cannot happen when the opcodes cover every difference
                raise RecordError("the pairs do not give the old text")
            return pairs
        i1, i2, j1, j2 = hunks[bad]
        if i1 == 0 and i2 == len(a):
            raise RecordError(f"no unique text around a change: {pairs[bad][0][:80]!r}")
        if i1 > 0:
            i1, j1 = i1 - 1, j1 - 1
        if i2 < len(a):
            i2, j2 = i2 + 1, j2 + 1
        hunks[bad] = [i1, i2, j1, j2]


def _git_show(rel: str) -> str | None:
    proc = subprocess.run(["git", "show", f"HEAD:{rel}"], cwd=PROJECT, capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else None


def _head_record() -> dict[str, Any] | None:
    text = _git_show(RECORD_PATH.relative_to(PROJECT).as_posix())
    return json.loads(text) if text is not None else None


def _candidates(entry: dict[str, Any], runtime_text: str | None) -> list[str]:
    """The old texts an entry gives: its dropped text, or its pairs applied to the module's text."""
    if "dropped" in entry:
        return [entry["dropped"]["text"]]
    if runtime_text is None:
        return []
    old = apply_pairs(runtime_text, entry["amended"])
    return [] if old is None else [old]


def old_text(record: dict[str, Any], target: str, old: str, head: dict[str, Any] | None) -> str:
    """The text the recorded series had at ``old`` (a moved module), checked against the record's sha256 of it."""
    entry = record["moved"][target][old]
    expected = record["applied"][target]["post"][old]
    path = RUNTIME / entry["to"]
    found = _candidates(entry, path.read_text() if path.is_file() else None)
    head_entry = (head or {}).get("moved", {}).get(target, {}).get(old)
    if head_entry is not None:
        found += _candidates(head_entry, _git_show(f"runtime/{head_entry['to']}"))
    for text in found:
        if sha256(text) == expected:
            return text
    raise RecordError(f"{target}:{old} ({entry['to']}): neither runtime/ with the record's pairs nor HEAD's gives "
                      f"the recorded file (sha256 {expected[:12]})")


def amend(record: dict[str, Any], why: str, only: set[str] | None = None,
          head: dict[str, Any] | None = None) -> list[str]:
    """Bring the record's moved modules in step with runtime/ (module docstring); returns the package paths whose
    entries changed. ``head``: the record as committed, for old texts the current pairs no longer give."""
    changed = []
    for target, entries in sorted(record["moved"].items()):
        for old, entry in sorted(entries.items()):
            if only is not None and entry["to"] not in only:
                continue
            then = old_text(record, target, old, head)
            path = RUNTIME / entry["to"]
            if not path.is_file():
                if "dropped" not in entry:
                    entries[old] = {"to": entry["to"], "dropped": {"text": then, "why": why}}
                    changed.append(entry["to"])
                continue
            now = path.read_text()
            if "dropped" not in entry and apply_pairs(now, entry["amended"]) == then:
                continue
            entries[old] = {"to": entry["to"], "amended": pairs_for(now, then)}
            changed.append(entry["to"])
    if changed and why.strip() not in record["why_amended"]:  # a change recorded in steps says why once
        record["why_amended"] = f"{record['why_amended'].rstrip()}; {why.strip()}"
    return changed


def check(record: dict[str, Any]) -> list[str]:
    """One line per moved module whose entry does not give its recorded file from runtime/ (none: all hold)."""
    failures = []
    for target, entries in sorted(record["moved"].items()):
        for old, entry in sorted(entries.items()):
            path = RUNTIME / entry["to"]
            texts = _candidates(entry, path.read_text() if path.is_file() else None)
            if "dropped" in entry and path.exists():
                failures.append(f"{entry['to']}: recorded as dropped, but runtime/ holds it")
            elif not texts or sha256(texts[0]) != record["applied"][target]["post"][old]:
                failures.append(f"{entry['to']}: its entry does not give {target}:{old}")
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sameness_record.py", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    amend_parser = sub.add_parser("amend", help="record runtime/'s changes to moved modules")
    amend_parser.add_argument("--why", required=True, help="why the modules changed (appended to why_amended)")
    amend_parser.add_argument("--only", action="append", default=None, metavar="PACKAGE_PATH",
                              help="only this module (flashsac_runtime/...), repeatable")
    sub.add_parser("check", help="verify every moved module against the record, writing nothing")
    args = parser.parse_args(argv)
    record = json.loads(RECORD_PATH.read_text())
    try:
        if args.command == "check":
            failures = check(record)
            for line in failures:
                print(line, file=sys.stderr)
            return 1 if failures else 0
        if not args.why.strip():
            raise RecordError("--why must say why the modules changed")
        changed = amend(record, args.why, set(args.only) if args.only else None, _head_record())
    except RecordError as exc:
        print(f"sameness_record: {exc}", file=sys.stderr)
        return 1
    if changed:
        RECORD_PATH.write_text(dump(record))
    print(f"{len(changed)} module(s) recorded: {', '.join(changed) or 'none changed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
