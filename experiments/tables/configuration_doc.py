#!/usr/bin/env python3
"""docs/configuration.md, generated from the series itself: every key and environment variable it adds.

One source for each fact, so the reference cannot drift from the product:
- a config key's default and what it does are the series' own ``conf/flashsac/config.yaml`` (the key's value and
  the comment block above it, as a user reads them in the applied tree); the keys listed are those the series adds
  to UniLab 1.3.2's config;
- a key the code reads but the config does not name (set with Hydra's ``+``) is described by the sentence of the
  series' code that names it;
- an environment variable is the module constant or read that names it in the series' code or in the project's
  own package (runtime/flashsac_runtime, placed into the overlay), described by the ``#:`` comment above it;
- the patch that adds each one (the first in series order), or the module of the own package that reads it, and
  the ``Evidence:`` header of that patch (for a module: of the first patch that imports it).

``python experiments/tables/configuration_doc.py`` rewrites docs/configuration.md; ``--check`` exits 1 when it is
stale (the test suite runs it).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(PROJECT / "scripts"))

from patchset import api  # noqa: E402

DOC = PROJECT / "docs" / "configuration.md"
CONFIG = "src/unilab/conf/flashsac/config.yaml"
#: Task owners whose overrides of a key the series sets (the owner's value is that task's default); of an owner
#: the series adds, its overrides of the keys the series adds to the FlashSAC config.
OWNERS = ("src/unilab/conf/flashsac/task/g1_walk_flat/mjwarp.yaml",
          "src/unilab/conf/flashsac/task/go2_joystick_flat/mjwarp.yaml")
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w]*):(?: (?P<value>.*))?$")
ENV_NAME = re.compile(r"\"((?:FLASHSAC|UNISIM)_[A-Z0-9_]+)\"")
SELECT = re.compile(r"OmegaConf\.select\(cfg, \"(?P<key>[a-z_.]+)\"")

Patches = list[tuple[str, dict[str, str], list[str]]]


@dataclass(frozen=True)
class Entry:
    name: str
    default: str
    text: str
    patch: str
    evidence: str


def keys_with_comments(text: str) -> dict[str, tuple[str, str]]:
    """dotted key -> (value as written, the comment block right above it, joined) of a YAML config."""
    out: dict[str, tuple[str, str]] = {}
    path: list[tuple[int, str]] = []
    comments: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comments.append(stripped.lstrip("#").strip())
            continue
        match = KEY_LINE.match(line)
        if not match:
            comments = []
            continue
        indent = len(match["indent"])
        while path and path[-1][0] >= indent:
            path.pop()
        dotted = ".".join([*(k for _, k in path), match["key"]])
        value = (match["value"] or "").split(" #")[0].strip()
        if value:
            # A block that introduces several keys before describing this one: from this key's own line on.
            own = next((i for i, c in enumerate(comments) if c.startswith(f"{match['key']}:")), 0)
            out[dotted] = (value, " ".join(comments[own:]))
        else:
            path.append((indent, match["key"]))
        comments = []
    return out


def _adding_patch(patches: Patches, needle: str, *also: str) -> tuple[str, str]:
    """(name, Evidence header) of the first patch whose added lines contain ``needle`` (and each of ``also``:
    a key's comment tells two owners' equal values apart)."""
    for name, header, added in patches:
        if all(any(part in line for line in added) for part in (needle, *also)):
            return name.removesuffix(".patch"), header.get("Evidence", "").replace("\n", " ")
    raise ValueError(f"no patch of the series adds {needle!r}")


def config_entries(pre: bytes, post: bytes, patches: Patches) -> list[Entry]:
    """The keys the series adds to the config, in the config's order."""
    before, after = keys_with_comments(pre.decode()), keys_with_comments(post.decode())
    entries = []
    for key, (value, comment) in after.items():
        if key in before:
            continue
        leaf = key.rsplit(".", 1)[1]
        patch, evidence = _adding_patch(patches, f"{leaf}: {value}")
        entries.append(Entry(key, value, comment, patch, evidence))
    return entries


def unlisted_keys(listed: set[str], patches: Patches) -> list[Entry]:
    """Keys the series' code reads that the config does not name: the sentence of the code that names each."""
    entries = []
    for name, header, added in patches:
        for line in added:
            match = SELECT.search(line)
            if not match or match["key"] in listed or any(e.name == match["key"] for e in entries):
                continue
            prose = " ".join(a.strip().strip('"').strip() for a in added)
            sentence = next((s.strip() for s in re.split(r"(?<=\.) ", prose) if f"{match['key']}=" in s), "")
            entries.append(Entry(f"+{match['key']}", "not set", sentence.replace("``", "`"),
                                 name.removesuffix(".patch"), header.get("Evidence", "")))
    return entries


def env_entries(patches: Patches) -> list[Entry]:
    """Environment variables the series' code reads, each described by the ``#:`` comment above its name."""
    entries: dict[str, Entry] = {}
    for name, header, added in patches:
        for index, line in enumerate(added):
            for variable in ENV_NAME.findall(line):
                if variable in entries:
                    continue
                comment = []
                for above in reversed(added[:index]):
                    if not above.strip().startswith("#:"):
                        break
                    comment.insert(0, above.strip()[2:].strip())
                if comment:
                    entries[variable] = Entry(variable, "unset", " ".join(comment), name.removesuffix(".patch"),
                                              header.get("Evidence", ""))
    return sorted(entries.values(), key=lambda e: e.name)


def runtime_sources(patches: Patches) -> Patches:
    """The own package's modules as sources of environment variables: (module, the header of the first patch
    that imports it, the module's lines)."""
    sources = []
    for rel, data in sorted(api.own_package_files().items()):
        if not rel.endswith(".py"):
            continue
        module = rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        parent, _, base = module.rpartition(".")
        header = next((h for _, h, added in patches
                       if any(module in line or f"from {parent} import {base}" in line for line in added)), {})
        sources.append((module, header, data.decode().splitlines()))
    return sources


def _rows(entries: Sequence[Entry]) -> list[str]:
    lines = ["| name | default | what it does | patch | evidence |", "|---|---|---|---|---|"]
    for e in entries:
        text = e.text.replace("|", "\\|")
        lines.append(f"| `{e.name}` | `{e.default}` | {text} | `{e.patch}` | {e.evidence} |")
    return lines


def render() -> str:
    images, patches = api.series_files("unilab", (CONFIG, *OWNERS))
    pre, post = images[CONFIG]
    assert pre is not None and post is not None
    config = config_entries(pre, post, patches)
    owners = []
    series_keys = set(keys_with_comments(post.decode())) - set(keys_with_comments(pre.decode()))
    for owner in OWNERS:
        owner_pre, owner_post = images[owner]
        before = keys_with_comments((owner_pre or b"").decode())
        for key, (value, comment) in keys_with_comments((owner_post or b"").decode()).items():
            if before.get(key, (None,))[0] != value and (owner_pre is not None or key in series_keys):
                first_words = " ".join(comment.split()[:8])
                patch, evidence = _adding_patch(patches, f"{key.rsplit('.', 1)[1]}: {value}", first_words)
                task = owner.removeprefix("src/unilab/conf/flashsac/task/").removesuffix(".yaml")
                owners.append(Entry(f"{key} (task={task})", value, comment, patch, evidence))
    unlisted = unlisted_keys(set(keys_with_comments(post.decode())), patches)
    env = env_entries([*patches, *runtime_sources(patches)])
    out = [
        "# Configuration: every key and environment variable the series adds",
        "",
        "Generated by `experiments/tables/configuration_doc.py` from the series itself (do not edit by hand; "
        "`make test` checks it):",
        "a key's default and description are the applied `conf/flashsac/config.yaml` (its value and the comment "
        "above it, as the tree shows them); an environment variable's description is the `#:` comment above it in "
        "the series' code or the project's own package `flashsac_runtime`; *patch* is the patch that adds it (or the "
        "module of `flashsac_runtime` that reads it) and *evidence* that patch's `Evidence:` header (for a module, "
        "the header of the first patch that imports it).",
        "Set a key on the training command line (`algo.algo_params.finite_guard=false`, "
        "`training.collector=host`); a key marked `+` is not in the config and takes Hydra's `+` prefix.",
        "Back to the [front page](../README.md).",
        "",
        f"## Config keys ({len(config) + len(unlisted)})",
        "",
        *_rows([*config, *unlisted]),
        "",
        "## Task defaults the series sets",
        "",
        *_rows(owners),
        "",
        f"## Environment variables ({len(env)})",
        "",
        *_rows(env),
        "",
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"configuration_doc: {DOC.relative_to(PROJECT)} is stale "
                  "(run `python experiments/tables/configuration_doc.py`)", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
