"""Port report: the classifier against real trees whose answer is known, the CLI's refusals, the committed reports.

Controls: the pinned base itself (every hunk applies), the series' own output (every hunk already upstream),
the base carrying only the first patches (those upstream, the rest applies), and tampered bases (a changed
context line conflicts, a shifted file applies at an offset, a missing file is reported as missing).
"""

from __future__ import annotations

import copy
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import patchset_env
from patchset.paths import PATCHES_DIR, PORT_REPORT_DIR, cache_dir
from patchset.plan import apply_file_patch, plan_target
from patchset.port import (
    APPLIES,
    CONFLICTS,
    MISSING,
    OFFSET,
    PARTLY_UPSTREAM,
    UPSTREAM,
    HunkResult,
    classify_series,
    patch_verdict,
)
from patchset.port_report import render_markdown
from patchset.releases import PROJECTS, ReleaseTree, base_release
from patchset.series import load_series
from patchset.trees import read_file

SERIES = load_series(PATCHES_DIR)
NORMALIZATION = "uni_rl/algos/common/normalization.py"
LEARNER = "uni_rl/algos/flash_sac/learner.py"
OFFLINE_INDEX = "http://127.0.0.1:9/simple"  # nothing listens on the discard port


def classify(target: str, read_target: Callable[[str], bytes | None]) -> list[list[HunkResult]]:
    """The series' patches of one tree classified over read_target, against the real pinned base."""
    project = next(p for p in PROJECTS.values() if p.series_target == target)
    return classify_series(SERIES.for_target(target), read_target, ReleaseTree(base_release(project)).read)


def pinned_uni_rl(edits: dict[str, bytes | None]) -> Callable[[str], bytes | None]:
    """The pinned uni_rl tree with some files replaced (None: deleted)."""
    base = ReleaseTree(base_release(PROJECTS["unilab-rl"])).read
    return lambda rel: edits[rel] if rel in edits else base(rel)


def verdicts(results: list[list[HunkResult]]) -> dict[tuple[str, str, int], str]:
    return {(h.patch, h.file, h.index): h.verdict for hunks in results for h in hunks}


def report_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "patchset", "port-report", *args],
                          env=patchset_env(**env), capture_output=True, text=True, timeout=600, check=False)


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=3).close()
        return True
    except OSError:
        return False


@pytest.mark.parametrize(("spec", "target"), [("unilab-rl==1.3.2", "uni_rl"), ("unilab==1.3.2", "unilab")])
def test_pinned_base_every_hunk_applies(tmp_path: Path, pins: dict[str, str], spec: str, target: str) -> None:
    """Positive control, through the CLI and from the cache only: the base the series was written for."""
    patches = len(SERIES.for_target(target))
    proc = report_cli("--target", spec, "--output", str(tmp_path), PATCHSET_INDEX_URL=OFFLINE_INDEX)
    assert proc.returncode == 0, proc.stderr
    name = spec.replace("==", "-")
    report = json.loads((tmp_path / f"{name}.json").read_text())
    hunks = [h for row in report["patches"] for h in row["hunks"]]
    assert len(report["patches"]) == patches and len(hunks) >= patches
    assert {(h["verdict"], h["offset"]) for h in hunks} == {(APPLIES, 0)}
    assert report["summary"]["patches"] == {APPLIES: patches}
    pinned_sha = pins["UNILAB_RL_BASE_WHEEL_SHA256" if spec.startswith("unilab-rl") else "UNILAB_SDIST_SHA256"]
    assert report["target"]["sha256"] == report["base"]["sha256"] == pinned_sha
    assert f"{patches} applies" in (tmp_path / f"{name}.md").read_text()


def test_post_image_every_hunk_already_upstream(patched_unilab_root: Path, patched_uni_rl_root: Path) -> None:
    """Negative control: the trees the real applier produced carry every change of the series."""
    for target, root in (("unilab", patched_unilab_root), ("uni_rl", patched_uni_rl_root)):
        results = classify(target, lambda rel, root=root: read_file(root, rel))
        assert set(verdicts(results).values()) == {UPSTREAM}, target
        assert {patch_verdict(hunks) for hunks in results} == {UPSTREAM}


def test_first_patches_upstream_the_rest_applies() -> None:
    """A target that took patches 1-4 verbatim: those are upstream, the rest apply exactly on top."""
    patches = SERIES.for_target("uni_rl")
    base = ReleaseTree(base_release(PROJECTS["unilab-rl"])).read
    taken = plan_target(patches[:4], base)
    results = classify("uni_rl", pinned_uni_rl({path: change.post for path, change in taken.items()}))
    assert [patch_verdict(hunks) for hunks in results] == [UPSTREAM] * 4 + [APPLIES] * (len(patches) - 4)


def test_one_hunk_taken_is_told_apart() -> None:
    """A target that took one hunk (7 added lines) of uni_rl 0001 in learner.py and nothing else: that hunk
    is upstream (the file-level merge cannot say so: the file lacks the patch's other hunks), the patch is
    partly upstream, the later hunks of that file apply 7 lines further down."""
    first = SERIES.for_target("uni_rl")[0]
    pfile = copy.copy(next(f for f in first.diff if f.path.endswith(LEARNER)))
    del pfile[1:]
    base = ReleaseTree(base_release(PROJECTS["unilab-rl"])).read
    results = classify("uni_rl", pinned_uni_rl({LEARNER: apply_file_patch(pfile, base(LEARNER), first.name)}))
    taken = (first.name, LEARNER, 2)
    found = verdicts(results)
    assert found.pop(taken) == UPSTREAM
    assert set(found.values()) == {APPLIES, OFFSET}
    assert {h.offset for hunks in results for h in hunks if h.verdict == OFFSET} == {7}
    assert patch_verdict(results[0]) == PARTLY_UPSTREAM


def test_tampered_targets() -> None:
    """A changed removed line conflicts; a line added on top shifts a file (applies at offset); a missing
    file is missing. The rest still applies."""
    base = ReleaseTree(base_release(PROJECTS["unilab-rl"])).read
    old = b"batch_count_t = torch.as_tensor(batch_count, device=self.count.device).to("
    assert old in base(NORMALIZATION)
    tampered = {
        NORMALIZATION: base(NORMALIZATION).replace(old, old.replace(b"as_tensor", b"tensor")),
        LEARNER: b"# an upstream line on top\n" + base(LEARNER),
    }
    results = verdicts(classify("uni_rl", pinned_uni_rl(tampered)))
    by_file: dict[str, set[str]] = {}
    for (_, path, _), verdict in results.items():
        by_file.setdefault(path, set()).add(verdict)
    assert by_file.pop(NORMALIZATION) == {CONFLICTS}
    assert by_file.pop(LEARNER) == {OFFSET}
    assert set().union(*by_file.values()) == {APPLIES}

    missing = verdicts(classify("uni_rl", pinned_uni_rl({NORMALIZATION: None})))
    assert {v for (_, path, _), v in missing.items() if path == NORMALIZATION} == {MISSING}
    assert {v for (_, path, _), v in missing.items() if path != NORMALIZATION} == {APPLIES}


@pytest.mark.parametrize(("args", "message"), [
    (["--target", "unilab-rll==1.4.0"], "unknown target 'unilab-rll'"),
    (["--target", "unilab-rl"], "is not of the form"),
    (["--target", "unilab-rl==one"], "is not a version"),
    ([], "needs --target"),
])
def test_bad_target_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    proc = report_cli(*args, "--output", str(tmp_path / "out"))
    assert proc.returncode == 1 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_offline_without_cache_is_one_line(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc = report_cli("--target", "unilab-rl==1.4.0", "--output", str(tmp_path / "out"),
                      PATCHSET_CACHE=str(cache), PATCHSET_INDEX_URL=OFFLINE_INDEX)
    assert proc.returncode == 1, proc.stdout
    assert "is not in the cache" in proc.stderr and "cannot be downloaded" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists() and list(cache.iterdir()) == []


def committed_reports() -> list[Path]:
    return sorted(PORT_REPORT_DIR.glob("*.json"))


@pytest.mark.parametrize("path", committed_reports(), ids=lambda p: p.stem)
def test_committed_markdown_is_generated(path: Path) -> None:
    report = json.loads(path.read_text())
    assert path.with_suffix(".md").read_text() == render_markdown(report)


@pytest.mark.parametrize("path", committed_reports(), ids=lambda p: p.stem)
def test_committed_report_regenerates(tmp_path: Path, path: Path) -> None:
    """The committed report is what the tool says today (needs the release: cached, or PyPI reachable)."""
    report = json.loads(path.read_text())
    if not (cache_dir() / report["target"]["file"]).is_file() and not pypi_reachable():
        pytest.skip(f"{report['target']['file']} is not cached and PyPI is unreachable")
    proc = report_cli("--target", f"{report['target']['project']}=={report['target']['version']}",
                      "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / path.name).read_text() == path.read_text()


def test_version_not_on_pypi(tmp_path: Path) -> None:
    if not pypi_reachable():
        pytest.skip("PyPI is unreachable")
    proc = report_cli("--target", "unilab-rl==0.0.999", "--output", str(tmp_path / "out"),
                      PATCHSET_CACHE=str(tmp_path / "cache"))
    assert proc.returncode == 1 and "unilab-rl 0.0.999 is not on the package index" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

