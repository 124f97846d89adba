"""Every prefix of the series is a working tree, and the curated series builds what the series before it built.

For each k, the first k patches are planned exactly over the pristine pinned trees; each distinct uni_rl (and
unisim) prefix is written out and, in a child process forked from one interpreter that imported torch, its
compiler front end and MuJoCo's bindings once (cheap: installed packages every prefix shares, never uni_rl or
unisim; children side by side, one per core, one torch thread each), its patched modules are imported and the
learner's CPU smoke test runs (critic, actor and target updates give finite metrics), with its switches off and
then with finite_guard and deferred_metrics on where the prefix has them; every run must end with the parameters
and statistics of unpatched 1.3.2, bit for bit (a negative control, the full series whose actor loss no longer
detaches the temperature, must not).
tests/data/series-3acca94a9d68.json records the fully applied trees of the series the curated one replaced
(83 patches in the order they were written): the curated series must give exactly those trees, every file of
every target, but for the texts the record lists (comments that named patches by their old numbers, and the
switches removed since because they measured no gain, each as the text the series has now and the text it had)
and the modules it added that are now the project's own package (runtime/flashsac_runtime, placed into the
overlay: each put back at its old path with its old import lines must be the recorded file; a module the package no longer has
is recorded whole, as ``dropped``, with why); dropping any one of its patches, or changing a line of the own
package, must not. tests/sameness_record.py writes the record's entries of the own package from runtime/; its pairs
are checked here too (unique, in place, giving the old text; an ambiguous pair widened, not accepted).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import PROJECT
import sameness_record
from series_images import applied_files, applied_trees, tree_digest, write_tree
from patchset.overlay import build, own_files
from patchset.scratch import pristine_trees
from patchset.series import load_series

RECORD = json.loads((PROJECT / "tests" / "data" / "series-3acca94a9d68.json").read_text())

# Runs in a child per prefix root, `jobs` children at a time: imports and the smoke test; prints one line
# "<root> <digests> ok" or "<root> error ...".
CHILD = r"""
import importlib, math, os, sys, pkgutil
import torch
# Installed, not patched: imported once here instead of once per fork (about a second each on 2 cores).
import torch._dynamo, mujoco, mjbatch
torch.set_num_threads(1)  # the children run side by side, one core each


def say(*words):
    # One write of one short line: atomic on the shared pipe, so the children's lines never interleave.
    os.write(1, (" ".join(map(str, words)) + "\n").encode())


jobs, roots = int(sys.argv[1]), sys.argv[2:]
running = 0
for root in roots:
    if running == jobs:
        os.wait()
        running -= 1
    pid = os.fork()
    if pid == 0:
        try:
            sys.path.insert(0, root)
            import uni_rl, unisim
            assert uni_rl.__file__.startswith(root) and unisim.__file__.startswith(root)
            for mod in ("uni_rl.algos.flash_sac.learner", "uni_rl.algos.flash_sac.double_buffer",
                        "uni_rl.offpolicy.double_buffer_runner", "uni_rl.algos.common.normalization",
                        "unisim.backend.mujoco.backend"):
                importlib.import_module(mod)
            for extra in ("flashsac_runtime.learner.deferred_metrics", "flashsac_runtime.learner.update_schedule"):
                if os.path.exists(os.path.join(root, *extra.split(".")) + ".py"):
                    importlib.import_module(extra)
            import hashlib, inspect
            from uni_rl.algos.flash_sac.learner import FlashSACLearner
            # Switches off, then every CPU switch this prefix's learner has turned on.
            params = inspect.signature(FlashSACLearner.__init__).parameters
            digests = []
            for switches in ({}, {k: True for k in ("finite_guard", "deferred_metrics") if k in params}):
                torch.manual_seed(0)
                l = FlashSACLearner(obs_dim=12, action_dim=4, critic_obs_dim=16, actor_hidden_dim=32,
                                    critic_hidden_dim=64, **switches)
                g = torch.Generator().manual_seed(1)
                for _ in range(2):
                    b = {"obs": torch.randn(32, 12, generator=g), "next_obs": torch.randn(32, 12, generator=g),
                         "actions": torch.rand(32, 4, generator=g) * 2 - 1, "rewards": torch.randn(32, generator=g),
                         "dones": torch.zeros(32), "truncated": torch.zeros(32),
                         "critic": torch.randn(32, 16, generator=g), "next_critic": torch.randn(32, 16, generator=g)}
                    metrics = {**l.update_critic(b), **l.update_actor(b)}
                    l.soft_update_target()
                    if switches.get("deferred_metrics"):
                        assert not metrics, metrics
                        metrics = l.read_deferred_metrics()
                    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
                    if switches.get("finite_guard"):
                        assert metrics["critic_skip_rate"] == metrics["actor_skip_rate"] == 0.0, metrics
                h = hashlib.sha256()
                for module in (l.actor, l.critic, l.target_critic, l.temperature):
                    for tensor in (*module.parameters(), *module.buffers()):
                        h.update(tensor.detach().contiguous().numpy().tobytes())
                digests.append(h.hexdigest()[:16])
            say(root, " ".join(digests), "ok")
            os._exit(0)
        except BaseException as exc:
            say(root, "error", type(exc).__name__, str(exc)[:300].replace("\n", " "))
            os._exit(1)
    running += 1
while running:
    os.wait()
    running -= 1
"""


@pytest.fixture(scope="module")
def trees() -> dict:
    return pristine_trees()


def test_every_prefix_applies_imports_and_trains_on_cpu(tmp_path: Path, trees: dict) -> None:
    series = load_series(PROJECT / "patches")
    pristine = {t: trees[t] for t in ("uni_rl", "unisim")}
    roots, seen = [], set()
    for k in range(len(series.patches) + 1):
        prefix = type(series)(series.patches[:k], "")
        files, _ = build(pristine, prefix)  # exact: a hunk that does not apply on this prefix raises here
        applied_trees(series.patches[:k], trees)  # every target of the prefix plans too (unilab included)
        key = tuple(p.name for p in series.patches[:k] if p.target != "unilab")
        if key in seen:
            continue
        seen.add(key)
        root = tmp_path / f"prefix-{k:02d}"
        write_tree(root, files)
        roots.append(str(root))
    # Negative control: the whole series with the actor loss's temperature no longer detached (the one
    # backward through actor and temperature losses relies on it) still trains, but no longer like 1.3.2.
    negative = tmp_path / "negative-temperature-not-detached"
    shutil.copytree(roots[-1], negative)
    learner = negative / "uni_rl" / "algos" / "flash_sac" / "learner.py"
    source = learner.read_text()
    detached = "actor_loss = (temp_value.detach() * log_probs - min_q).mean()"
    assert source.count(detached) == 1
    learner.write_text(source.replace(detached, detached.replace(".detach()", "")))
    jobs = str(max(2, os.cpu_count() or 2))
    proc = subprocess.run([sys.executable, "-c", CHILD, jobs, *roots, str(negative)], capture_output=True,
                          text=True, timeout=900, check=False)
    lines = {line.split()[0]: line for line in proc.stdout.strip().splitlines()}  # the children end in any order
    assert sorted(lines) == sorted([*roots, str(negative)]), proc.stdout + proc.stderr[-2000:]
    assert all(line.endswith(" ok") for line in lines.values()), proc.stdout + proc.stderr[-2000:]
    # Every switch is off by default and finite_guard/deferred_metrics change nothing on finite data: each
    # prefix, switches off or on, trains to exactly the parameters (and statistics) of unpatched 1.3.2 (k = 0).
    digests = {d for root in roots for d in lines[root].split()[1:-1]}
    assert len(digests) == 1, proc.stdout
    assert not digests & set(lines[str(negative)].split()[1:-1]), proc.stdout


def _as_recorded(patches: list, trees: dict, runtime: dict | None = None,
                 added_files: dict | None = None) -> tuple[dict, dict]:
    """The applied trees of ``patches`` with the record's differences put back as they were (each file added since
    removed, each amended text replaced by the recorded text, each removed file restored, each module moved into
    the project's own package put back at its old path with its old import lines), and per target the files whose
    content differs from the record's post-images. runtime: the own package's files (overlay-relative), by default
    as runtime/ holds them; added_files: per target, path -> why, by default the record's ``added_files``. The files
    the series adds to a target's pristine tree must be exactly those listed (moved modules are put back later)."""
    runtime = own_files() if runtime is None else runtime
    added_files = RECORD.get("added_files", {}) if added_files is None else added_files
    got, differing = {}, {}
    for target, (files, post) in applied_files(patches, trees).items():
        files = dict(files)
        listed = added_files.get(target, {})
        new = sorted(rel for rel in files if rel not in trees[target])
        assert new == sorted(listed), (target, "files added to the pristine tree", new, "listed", sorted(listed))
        assert all(str(why).strip() for why in listed.values()), (target, "an added file without why")
        for rel in listed:
            del files[rel]
        for rel, pairs in RECORD["amended"].get(target, {}).items():
            text = files[rel][0].decode()
            for new, old in pairs:
                assert text.count(new) == 1, (target, rel, new)
                text = text.replace(new, old)
            files[rel] = (text.encode(), files[rel][1])
        for rel, text in RECORD["removed_files"].get(target, {}).items():
            assert rel not in files, (target, rel)
            files[rel] = (text.encode(), 0o644)
        for rel, entry in RECORD["moved"].get(target, {}).items():
            assert rel not in files, (target, rel)
            if "dropped" in entry:  # a moved module the own package no longer has: its whole old text
                assert entry["to"] not in runtime and entry["dropped"]["why"].strip(), (target, rel)
                files[rel] = (entry["dropped"]["text"].encode(), 0o644)
                continue
            text = runtime[entry["to"]][0].decode()
            for new, old in entry["amended"]:
                assert text.count(new) == 1, (entry["to"], new)
                text = text.replace(new, old)
            files[rel] = (text.encode(), 0o644)
        before = RECORD["applied"][target]["post"]
        differing[target] = sorted(rel for rel in set(before) | set(post) if before.get(rel) != post.get(rel))
        got[target] = tree_digest(files)
    return got, differing


def test_curated_series_builds_the_trees_of_the_series_it_replaced(trees: dict) -> None:
    series = load_series(PROJECT / "patches")
    assert len(series.patches) < len(RECORD["patches"])
    got, differing = _as_recorded(series.patches, trees)
    # The post-images differ in exactly the amended and removed files, and with their recorded texts put back every
    # target's whole tree (every file, touched or not: path, mode and bytes) is the recorded one.
    assert differing == {t: sorted({*RECORD["amended"].get(t, {}), *RECORD["removed_files"].get(t, {}),
                                    *RECORD["moved"].get(t, {}), *RECORD.get("added_files", {}).get(t, {})})
                         for t in differing}
    assert got == {t: RECORD["applied"][t]["tree_sha256"] for t in got}


def test_the_own_package_is_the_moved_modules_and_docstrings() -> None:
    """runtime/flashsac_runtime holds exactly the modules the record lists as moved, the modules it lists as added
    since (each with why), and package files that are only a docstring: no code reaches the overlay that the
    sameness check above did not compare or the record does not name."""
    moved = {entry["to"] for entries in RECORD["moved"].values() for entry in entries.values()
             if "dropped" not in entry}
    added = RECORD.get("added", {})
    assert all(why.strip() for why in added.values()) and set(added) <= set(own_files())
    for rel, (data, _) in own_files().items():
        if rel in moved or rel in added:
            continue
        tree = ast.parse(data)
        assert rel.endswith("__init__.py") and len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) \
            and isinstance(tree.body[0].value, ast.Constant), f"{rel} is neither a moved module nor a docstring"
    assert moved <= set(own_files())


def test_the_sameness_record_catches_a_changed_own_module(trees: dict) -> None:
    """Negative control: one changed line in a module of the own package is not the recorded trees."""
    runtime = dict(own_files())
    rel = "flashsac_runtime/learner/update_schedule.py"
    data, mode = runtime[rel]
    assert data.count(b"import functools") == 1
    runtime[rel] = (data.replace(b"import functools", b"import functools  # changed"), mode)
    got, _ = _as_recorded(load_series(PROJECT / "patches").patches, trees, runtime)
    assert got["uni_rl"] != RECORD["applied"]["uni_rl"]["tree_sha256"]
    assert {t: got[t] for t in ("unilab", "unisim")} == {t: RECORD["applied"][t]["tree_sha256"]
                                                         for t in ("unilab", "unisim")}


def test_the_sameness_record_names_every_added_file(trees: dict) -> None:
    """Negative controls: a file the series adds that the record does not list, and a listed file the series does
    not add, each fail the comparison; the record's own list passes (the test above)."""
    patches = load_series(PROJECT / "patches").patches
    listed = RECORD["added_files"]
    assert listed["unilab"], "the series adds files to the unilab tree and the record lists them"
    unlisted = {**listed, "unilab": dict(list(listed["unilab"].items())[1:])}
    with pytest.raises(AssertionError, match="files added to the pristine tree"):
        _as_recorded(patches, trees, added_files=unlisted)
    absent = {**listed, "unilab": {**listed["unilab"], "src/unilab/conf/flashsac/task/absent/mjwarp.yaml": "none"}}
    with pytest.raises(AssertionError, match="files added to the pristine tree"):
        _as_recorded(patches, trees, added_files=absent)
    without_why = {**listed, "unilab": {rel: " " for rel in listed["unilab"]}}
    with pytest.raises(AssertionError, match="an added file without why"):
        _as_recorded(patches, trees, added_files=without_why)


def test_the_sameness_record_catches_a_missing_patch(trees: dict) -> None:
    """Negative control: the curated series without any one of its patches is not the recorded trees."""
    patches = load_series(PROJECT / "patches").patches
    for piece in patches:
        rest = [p for p in patches if p is not piece]
        try:
            got, _ = _as_recorded(rest, trees)
        except Exception:  # noqa: BLE001 - a later patch no longer applying also proves the piece mattered
            continue
        assert got != {t: RECORD["applied"][t]["tree_sha256"] for t in got}, piece.name


def test_the_record_tool_holds_on_the_record_and_writes_unique_pairs() -> None:
    """tests/sameness_record.py: every moved module's entry gives its recorded file from runtime/ (``check``); pairs
    it writes give the old text back through the test's own replacement, each ``now`` once and in place, widened
    where a change alone is ambiguous or empty. Controls: a line changed in a copy of runtime/'s text breaks its
    entry's reconstruction, and a bare pair of a repeated line is not what the tool writes."""
    assert sameness_record.check(RECORD) == []
    now = "def f():\n    return 1\n\n\ndef g():\n    return 1\n"
    then = "def f():\n    return 1\n\n\ndef g():\n    return 2\n\n# added\n"
    pairs = sameness_record.pairs_for(now, then)
    assert sameness_record.apply_pairs(now, pairs) == then and all(now.count(new) == 1 for new, _ in pairs)
    assert ["    return 1\n", "    return 2\n\n# added\n"] not in pairs  # the change alone occurs twice
    assert sameness_record.pairs_for("x\nx\nx\n", "x\nx\n") == [["x\nx\nx\n", "x\nx\n"]]
    target, old = "unilab", "src/unilab/envs/device/draws.py"
    entry = RECORD["moved"][target][old]
    text = (PROJECT / "runtime" / entry["to"]).read_text()
    changed = text.replace("from __future__ import annotations", "from __future__ import annotations  # x", 1)
    assert changed != text and sameness_record.sha256(sameness_record.apply_pairs(changed, entry["amended"])) \
        != RECORD["applied"][target]["post"][old]


def test_the_sameness_record_catches_a_changed_dropped_module(trees: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: a module recorded as dropped (its whole old text) with one line added is not the recorded
    trees."""
    dropped = [(t, rel, e) for t, entries in RECORD["moved"].items() for rel, e in entries.items() if "dropped" in e]
    assert dropped
    target, rel, entry = dropped[0]
    text = entry["dropped"]["text"]
    monkeypatch.setitem(RECORD["moved"][target], rel,
                        {**entry, "dropped": {**entry["dropped"], "text": text.replace("\n", "\n# changed\n", 1)}})
    got, _ = _as_recorded(load_series(PROJECT / "patches").patches, trees)
    assert got[target] != RECORD["applied"][target]["tree_sha256"]
