"""Apply and revert under faults, at every distinct kind of mutation, on the real pinned trees.

A clean apply and a clean revert are traced first (PATCHSET_FAULT_TRACE): that gives the list of filesystem
mutations each makes through the one write layer (patchset/fsops.py), "<n> <op> <path>". At each chosen mutation
the process is stopped just before it by SIGTERM (orderly rollback), by an injected ENOSPC, and by kill -9
followed by each recovery path (status then revert; apply). After every step the checkout and the overlay must be
byte- and mode-exact to pristine or to applied, hold no temporary of ours, carry a consistent state, and every
failure must be one line on stderr. Points run in parallel threads (each its own tree copy); the subprocesses do
the work.

Which mutations: `covering_points` computes them from the recorded trace (FAULTS_EVERY_MUTATION=1 takes every
one). Each mutation has a kind (its op: mkdir, fill, write, fsync, rename, unlink, rmdir, rmtree) and a role (the
part of the trees it touches: the journal directory, the state file in it, a checkout file, an overlay package,
the overlay's manifest; `mutation_role`). What a fault leaves behind is decided by the mutation it interrupts
(its kind and role say which temporary or half-made entry can exist, and which branch of the rollback or of the
finished revert meets it) and by which earlier mutations completed. Recovery treats the files of one role one
by one, each by its own journal record through the same branch (restore from the backup, unlink a created file,
skip a file already as wanted), so two points inside one run of a kind x role differ only in how many such
files are already done. The first and the last mutation of every kind x role therefore cover every distinct
path: "none of this kind done yet" and "all but the last done", with every earlier group complete. The first
and the last mutation of the whole trace are always among them. A mutation of an unknown role fails the test,
so a new kind of write cannot slip past the selection.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import make_overlay, patchset, patchset_env
from faultcheck import differences, json_problems, output_problems, snapshot
from patchset.fsops import NEEDS_SPACE, TMP_PREFIX
from patchset.overlay import MANIFEST
from patchset.state import state_dir

WORKERS = max(2, os.cpu_count() or 2)
#: FAULTS_EVERY_MUTATION=1: exercise every traced mutation, not only the covering ones (minutes longer).
EVERY_MUTATION = os.environ.get("FAULTS_EVERY_MUTATION") == "1"
ROLES = ("journal", "state", "checkout file", "overlay package", "overlay manifest")


def mutation_role(path: Path, checkout: Path, overlay: Path) -> str:
    """The part of the trees a traced mutation touches (one of ROLES), from its path and the traced run's roots.

    The journal is the state directory (made whole under a temporary name, discarded under another); the state is
    the state file inside it, rewritten when the phase changes; the overlay's manifest is its MANIFEST.json.
    """
    journal = state_dir(checkout)
    if path == overlay / MANIFEST or (path.parent == overlay and path.name.startswith(f"{TMP_PREFIX}{MANIFEST}-")):
        return "overlay manifest"
    if path.is_relative_to(overlay):
        return "overlay package"
    if path.is_relative_to(journal) and path != journal:
        return "state"
    if path == journal or (path.parent == checkout
                           and path.name.startswith((f"{TMP_PREFIX}state-", f"{TMP_PREFIX}discard-"))):
        return "journal"
    if path.is_relative_to(checkout):
        return "checkout file"
    raise ValueError(f"a mutation outside the checkout {checkout} and the overlay {overlay}: {path}")


def mutation_kinds(trace: list[str], checkout: Path, overlay: Path) -> list[tuple[str, str]]:
    """(op, role) of every traced mutation, in trace order."""
    kinds = []
    for line in trace:
        _, op, path = line.split(" ", 2)
        kinds.append((op, mutation_role(Path(path), checkout, overlay)))
    return kinds


def covering_points(trace: list[str], checkout: Path, overlay: Path) -> list[int]:
    """The 1-based mutations to stop at: the first and the last of every (op, role), and of the whole trace.

    Why these cover every distinct path: the module's docstring.
    """
    groups: dict[tuple[str, str], list[int]] = {}
    for number, kind in enumerate(mutation_kinds(trace, checkout, overlay), 1):
        groups.setdefault(kind, []).append(number)
    kept = {1, len(trace)} | {numbers[0] for numbers in groups.values()} | {numbers[-1] for numbers in groups.values()}
    return sorted(kept)


@dataclass(frozen=True)
class Reference:
    """What pristine and applied look like (relative snapshots), and how many mutations apply and revert make."""

    template: Path
    pristine: tuple[dict[str, str], dict[str, str]]
    applied: tuple[dict[str, str], dict[str, str]]
    apply_trace: list[str]
    revert_trace: list[str]
    traced_in: tuple[Path, Path] = (Path(), Path())  # the checkout and overlay the traces were recorded in

    def points(self, trace: list[str]) -> list[int]:
        """The mutations a fault test stops at: covering_points, or all of them with FAULTS_EVERY_MUTATION=1."""
        return list(range(1, len(trace) + 1)) if EVERY_MUTATION else covering_points(trace, *self.traced_in)


class Point:
    """One tree copy (checkout + overlay) on which one mutation point is exercised."""

    def __init__(self, base: Path, ref: Reference) -> None:
        base.mkdir()
        self.checkout, self.ref = base / "unilab", ref
        shutil.copytree(ref.template, self.checkout, symlinks=True)
        self.overlay = make_overlay(base / "overlay")
        self.problems: list[str] = []

    def run(self, command: str, codes: set[int], fault: str | None = None, needle: str = "",
            ) -> subprocess.CompletedProcess:
        env = {"PATCHSET_FAULT_AT": fault} if fault else None
        proc = patchset(self.overlay, command, "--unilab", str(self.checkout), env=env)
        self.problems += [f"{command} ({fault or 'no fault'}): {p}" for p in output_problems(proc, codes, needle)]
        return proc

    def expect(self, which: str, after: str) -> None:
        """The trees are exactly pristine or exactly applied (state and overlay manifest consistent)."""
        want = self.ref.pristine if which == "pristine" else self.ref.applied
        got = (snapshot(self.checkout), snapshot(self.overlay))
        found = differences(got[0], want[0], "checkout") + differences(got[1], want[1], "overlay")
        if which == "applied" and not found:
            found = json_problems(self.checkout, self.overlay)
        self.problems += [f"{which} after {after}: {p}" for p in found]


def _traced(point: Point, command: str, trace: Path) -> list[str]:
    proc = patchset(point.overlay, command, "--unilab", str(point.checkout), env={"PATCHSET_FAULT_TRACE": str(trace)})
    assert proc.returncode == 0, proc.stderr
    return trace.read_text().splitlines()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, pristine_template: Path) -> Reference:
    base = tmp_path_factory.mktemp("faults")
    point = Point(base / "reference", Reference(pristine_template, ({}, {}), ({}, {}), [], []))
    pristine = (snapshot(point.checkout), snapshot(point.overlay))
    apply_trace = _traced(point, "apply", base / "apply.trace")
    applied = (snapshot(point.checkout), snapshot(point.overlay))
    revert_trace = _traced(point, "revert", base / "revert.trace")
    assert (snapshot(point.checkout), snapshot(point.overlay)) == pristine
    return Reference(pristine_template, pristine, applied, apply_trace, revert_trace, (point.checkout, point.overlay))


def _apply_point(point: Point, k: int) -> None:
    point.run("apply", {143}, f"{k}:term", "interrupted by SIGTERM; rolled back, nothing changed")
    point.expect("pristine", "SIGTERM")
    point.run("apply", {1}, f"{k}:errno=ENOSPC", "No space left on device")
    point.expect("pristine", "ENOSPC")
    point.run("apply", {-9}, f"{k}:kill")
    point.run("status", {0})
    point.run("revert", {0, 1}, needle="nothing to revert")
    point.expect("pristine", "kill -9, status, revert")
    point.run("apply", {-9}, f"{k}:kill")
    point.run("apply", {0})
    point.expect("applied", "kill -9, apply")
    point.run("revert", {0})
    point.expect("pristine", "kill -9, apply, revert")


def _revert_point(point: Point, k: int) -> None:
    point.run("apply", {0})
    point.run("revert", {143}, f"{k}:term", "interrupted by SIGTERM")
    point.expect("pristine", "SIGTERM (the revert completes first)")
    point.run("apply", {0})
    point.run("revert", {1}, f"{k}:errno=ENOSPC", "No space left on device")
    point.run("status", {0})
    point.run("revert", {0})
    point.expect("pristine", "ENOSPC, status, revert")
    point.run("apply", {0})
    point.run("revert", {-9}, f"{k}:kill")
    point.run("status", {0})
    point.run("revert", {0})
    point.expect("pristine", "kill -9, status, revert")
    point.run("apply", {0})
    point.run("revert", {-9}, f"{k}:kill")
    point.run("apply", {0})
    point.expect("applied", "kill -9, apply")
    point.run("revert", {0})
    point.expect("pristine", "kill -9, apply, revert")


def _enumerate(base: Path, ref: Reference, trace: list[str], points: list[int],
               scenario: Callable[[Point, int], None]) -> list[str]:
    def one(k: int) -> list[str]:
        point = Point(base / f"point-{k}", ref)
        scenario(point, k)
        if not point.problems:
            shutil.rmtree(base / f"point-{k}")
        return [f"mutation {k} ({trace[k - 1]}): {p}" for p in point.problems]
    with ThreadPoolExecutor(WORKERS) as pool:
        return [p for found in pool.map(one, points) for p in found]


def test_traces_name_every_kind_of_mutation(reference: Reference) -> None:
    """The enumeration is only as good as the trace: apply writes the journal, the checkout file (temporary,
    fsync, rename), the staged overlay and its manifest; revert rewrites, discards and unlinks."""
    ops = {line.split()[1] for line in reference.apply_trace}
    assert {"mkdir", "fill", "write", "fsync", "rename", "rmdir"} <= ops
    assert any(line.endswith("src/unilab/conf/flashsac/config.yaml") for line in reference.apply_trace)
    assert {"write", "fsync", "rename", "rmtree", "unlink"} <= {line.split()[1] for line in reference.revert_trace}
    print(f"mutation points: apply {len(reference.apply_trace)}, revert {len(reference.revert_trace)}")


def test_every_mutation_has_a_role_and_every_kind_is_kept(reference: Reference) -> None:
    """The selection tells the trees' parts apart (apply and revert each touch all five roles), keeps every
    kind x role of each trace and its first and last mutation, and skips some; a path outside both roots is
    refused rather than given a role."""
    for trace in (reference.apply_trace, reference.revert_trace):
        kinds = mutation_kinds(trace, *reference.traced_in)
        assert {role for _, role in kinds} == set(ROLES), kinds
        kept = covering_points(trace, *reference.traced_in)
        assert {kinds[k - 1] for k in kept} == set(kinds)
        assert kept[0] == 1 and kept[-1] == len(trace) and len(kept) < len(trace)
        print(f"{len(kept)} of {len(trace)} mutations cover {len(set(kinds))} kinds x roles")
    with pytest.raises(ValueError, match="outside the checkout"):
        mutation_role(Path("/elsewhere/file"), *reference.traced_in)


def test_kill_at_every_kind_of_mutation_of_apply(tmp_path: Path, reference: Reference) -> None:
    start = time.monotonic()
    points = reference.points(reference.apply_trace)
    problems = _enumerate(tmp_path, reference, reference.apply_trace, points, _apply_point)
    print(f"apply: {len(points)} of {len(reference.apply_trace)} mutation points in {time.monotonic() - start:.0f} s")
    assert not problems, "\n".join(problems)


@pytest.mark.extended  # about a minute on two cores; apply's enumeration, the revert's SIGINT rollback and the
# hostile-user reverts stay in the default suite
def test_kill_at_every_kind_of_mutation_of_revert(tmp_path: Path, reference: Reference) -> None:
    start = time.monotonic()
    points = reference.points(reference.revert_trace)
    problems = _enumerate(tmp_path, reference, reference.revert_trace, points, _revert_point)
    print(f"revert: {len(points)} of {len(reference.revert_trace)} mutation points in "
          f"{time.monotonic() - start:.0f} s")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("command", ["apply", "revert"])
def test_sigint_rolls_back_in_order(tmp_path: Path, reference: Reference, command: str) -> None:
    """SIGINT takes the SIGTERM path: exit 130, one line, the trees exact (apply at its middle mutation)."""
    point = Point(tmp_path / "point", reference)
    if command == "revert":
        point.run("apply", {0})
    middle = len(reference.apply_trace if command == "apply" else reference.revert_trace) // 2
    point.run(command, {130}, f"{middle}:int", "interrupted by SIGINT")
    point.expect("pristine", "SIGINT")
    assert not point.problems, "\n".join(point.problems)


def test_checks_catch_litter_modes_and_bytes(tmp_path: Path, reference: Reference) -> None:
    """Negative controls: a stray temporary, a changed mode, a changed byte, a wrong owner all fail the checks."""
    point = Point(tmp_path / "point", reference)
    point.expect("pristine", "nothing")
    assert point.problems == []
    config = point.checkout / "src/unilab/conf/flashsac/config.yaml"
    for damage, undo in (
        (lambda: (config.parent / ".flashsac-tmp-config.yaml-1-1").write_bytes(b""),
         lambda: (config.parent / ".flashsac-tmp-config.yaml-1-1").unlink()),
        (lambda: config.chmod(0o600), lambda: config.chmod(0o644)),
        (lambda: config.write_bytes(config.read_bytes() + b" "), lambda: config.write_bytes(config.read_bytes()[:-1])),
        (lambda: (point.overlay / ".flashsac-tmp-staging-1-1").mkdir(),
         lambda: (point.overlay / ".flashsac-tmp-staging-1-1").rmdir()),
    ):
        damage()
        point.expect("pristine", "damage")
        assert len(point.problems) == 1, point.problems
        point.problems.clear()
        undo()
    point.run("apply", {0})
    point.expect("applied", "apply")
    assert point.problems == []
    (point.checkout / ".flashsac-overlay" / "state.json").write_text(
        (point.checkout / ".flashsac-overlay" / "state.json").read_text().replace('"applied"', '"applying"'))
    point.expect("applied", "state damage")
    assert len(point.problems) == 1 and "phase applying" in point.problems[0]


#: `python -m patchset` with SIGTERM sent to itself once apply has committed (as it writes its result's notes).
SIGTERM_AFTER_COMMIT = (
    "import os, signal, sys\n"
    "from patchset import applier, cli\n"
    "notes = applier._flag_lines\n"
    "def signal_then_notes(state):\n"
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "    return notes(state)\n"
    "applier._flag_lines = signal_then_notes\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def test_sigterm_once_apply_committed_reports_it_applied(tmp_path: Path, reference: Reference) -> None:
    """SIGTERM after the commit can stop nothing: apply reports the truth, applied (exit 0, a note on stdout), and
    the trees are exactly applied."""
    point = Point(tmp_path / "point", reference)
    proc = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_COMMIT, "apply", "--unilab", str(point.checkout),
                           "--overlay", str(point.overlay)], env=patchset_env(), capture_output=True, text=True,
                          timeout=300, check=False)
    point.problems += output_problems(proc, {0})
    assert "NOTE: SIGTERM arrived once the apply had committed; it stays applied" in proc.stdout, proc.stdout
    point.expect("applied", "SIGTERM once committed")
    assert not point.problems, "\n".join(point.problems)


def _interrupt_at(command: list[str], delay: float) -> subprocess.CompletedProcess:
    """Run command, send it SIGINT delay seconds after its start, and return how it ended."""
    child = subprocess.Popen(command, env=patchset_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    return subprocess.CompletedProcess(command, child.returncode, out, err)


def test_ctrl_c_while_the_applier_starts_is_one_line(tmp_path: Path, reference: Reference) -> None:
    """Ctrl-C at any moment of a command's first tenths of a second, its imports included: at most one line and
    exit 130 (or no output at all, killed before Python's own handler is in place), never a traceback of ours.
    Python's own start before it runs any of the applier (the site module) is not the applier's to handle."""
    point = Point(tmp_path / "point", reference)
    command = [sys.executable, "-m", "patchset", "status", "--unilab", str(point.checkout), "--overlay",
               str(point.overlay)]
    delays = [0.01 + 0.025 * k for k in range(16)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda delay: _interrupt_at(command, delay), delays))
    problems, stopped = [], 0
    for delay, proc in zip(delays, results):
        if "Traceback" in proc.stderr and "patchset/__main__.py" not in proc.stderr:
            continue  # SIGINT during Python's own start or runpy, before the applier's first line ran
        stopped += proc.returncode == 130
        problems += [f"SIGINT at {delay:.3f} s: {p}" for p in output_problems(proc, {0, 130, -signal.SIGINT},
                                                                              "interrupted by SIGINT")]
    assert not problems, "\n".join(problems)
    assert stopped, [(p.returncode, p.stderr[-200:]) for p in results]  # the signal did land while it ran


def test_a_forced_revert_stopped_by_sigterm_still_names_the_saved_edits(tmp_path: Path, reference: Reference) -> None:
    """SIGTERM during `revert --force` lets it complete and ends it with one line (exit 143): that line still says
    where the edits were saved, for a revert of an applied checkout and for the completion of an interrupted one."""
    point = Point(tmp_path / "point", reference)
    config = point.checkout / "src/unilab/conf/flashsac/config.yaml"

    def forced_revert_stopped() -> Path:
        proc = patchset(point.overlay, "revert", "--unilab", str(point.checkout), "--force",
                        env={"PATCHSET_FAULT_AT": "1:term"})
        assert output_problems(proc, {143}, "interrupted by SIGTERM") == [], proc.stderr
        saved = sorted(point.checkout.glob(".flashsac-overlay-user-edits-*"))[-1]
        assert f"your edits were saved to {saved}" in proc.stderr, proc.stderr
        return saved

    point.run("apply", {0})
    config.write_bytes(config.read_bytes() + b"# mine\n")
    saved = forced_revert_stopped()
    assert (saved / "files" / "unilab" / "src/unilab/conf/flashsac/config.yaml").read_bytes().endswith(b"# mine\n")
    shutil.rmtree(saved)
    point.expect("pristine", "a forced revert stopped by SIGTERM")
    # a revert killed once its journal says 'reverting', an overlay file edited, then the forced completion
    point.run("apply", {0})
    trace = reference.revert_trace
    after_phase = next(n for n, line in enumerate(trace, 1) if line.split()[1] == "rename"
                       and line.endswith("/.flashsac-overlay/state.json")) + 1
    point.run("revert", {-9}, f"{after_phase}:kill")
    (point.overlay / "uni_rl" / "__init__.py").write_text("# mine\n")
    saved = forced_revert_stopped()
    shutil.rmtree(saved)
    point.expect("pristine", "a forced completion stopped by SIGTERM")
    assert not point.problems, "\n".join(point.problems)


def _full_disk_points(trace: list[str], checkout: Path, overlay: Path) -> list[int]:
    """Where a disk that fills up meets apply, once the journal is written: at its second checkout file (one is
    replaced), its last, the overlay's first package step and the last write of all (the state's phase; the
    overlay and its manifest are in place then)."""
    kinds = mutation_kinds(trace, checkout, overlay)
    space = [(n, role) for n, (op, role) in enumerate(kinds, 1) if op in NEEDS_SPACE and role != "journal"]
    files = [n for n, (op, role) in enumerate(kinds, 1) if op == "write" and role == "checkout file"]
    packages = [n for n, role in space if role == "overlay package"]
    return sorted({files[1], files[-1], packages[0], space[-1][0]})


def test_a_disk_that_fills_up_during_apply_is_rolled_back_whole(tmp_path: Path, reference: Reference) -> None:
    """From a point of apply on, every write that needs new space fails (ENOSPC): the rollback needs none, so
    apply ends with one line naming the path and "rolled back, nothing changed", the trees exactly pristine. A
    revert on a full disk stops before it changes anything (its journal cannot say 'reverting'), or, once it has,
    completes without new space."""
    points = _full_disk_points(reference.apply_trace, *reference.traced_in)
    assert len(points) == 4, points

    def one(k: int) -> list[str]:
        point = Point(tmp_path / f"apply-{k}", reference)
        proc = point.run("apply", {1}, f"{k}:full", "No space left on device: /")
        if "rolled back, nothing changed" not in proc.stderr or TMP_PREFIX in proc.stderr:
            point.problems.append(f"apply: {proc.stderr.strip()}")  # (the line names the file, not our temporary)
        point.expect("pristine", "a full disk")
        return [f"full disk from mutation {k} ({reference.apply_trace[k - 1]}): {p}" for p in point.problems]

    with ThreadPoolExecutor(WORKERS) as pool:
        problems = [p for found in pool.map(one, points) for p in found]
    point = Point(tmp_path / "revert", reference)
    point.run("apply", {0})
    point.run("revert", {1}, "1:full", "nothing was reverted")
    point.expect("applied", "a revert on a full disk")
    after_phase = next(n for n, line in enumerate(reference.revert_trace, 1) if line.split()[1] == "rename"
                       and line.endswith("/.flashsac-overlay/state.json")) + 1
    point.run("revert", {0}, f"{after_phase}:full")
    point.expect("pristine", "a revert that the disk filled up under once begun")
    assert not problems + point.problems, "\n".join(problems + point.problems)


def test_a_full_disk_with_an_overlay_shared_by_two_checkouts(tmp_path: Path, reference: Reference) -> None:
    """The second checkout on one overlay rewrites its manifest (its owners); a disk full from the apply's last
    write on (the manifest written, the phase not yet) still rolls back whole, and a revert of one owner the disk
    fills up under once begun completes: the manifest's new bytes were put aside before the first change."""
    point = Point(tmp_path / "point", reference)
    point.run("apply", {0})
    other = Path(shutil.copytree(reference.template, tmp_path / "other", symlinks=True))

    def owners() -> list[str]:
        return json.loads((point.overlay / MANIFEST).read_text())["owners"]

    def second(command: str, fault: str | None = None, trace: Path | None = None) -> subprocess.CompletedProcess:
        env = {**({"PATCHSET_FAULT_AT": fault} if fault else {}),
               **({"PATCHSET_FAULT_TRACE": str(trace)} if trace else {})}
        return patchset(point.overlay, command, "--unilab", str(other), env=env)

    assert second("apply", trace=tmp_path / "apply.trace").returncode == 0
    writes = [n for n, line in enumerate((tmp_path / "apply.trace").read_text().splitlines(), 1)
              if line.split()[1] in NEEDS_SPACE]
    assert second("revert", trace=tmp_path / "revert.trace").returncode == 0
    assert owners() == [str(point.checkout)]
    before = (point.overlay / MANIFEST).read_bytes()
    proc = second("apply", f"{writes[-1]}:full")
    point.problems += output_problems(proc, {1}, "rolled back, nothing changed")
    assert (point.overlay / MANIFEST).read_bytes() == before and not state_dir(other).exists(), proc.stderr
    assert second("apply").returncode == 0
    revert_trace = (tmp_path / "revert.trace").read_text().splitlines()
    after_phase = next(n for n, line in enumerate(revert_trace, 1) if line.split()[1] == "rename"
                       and line.endswith("/.flashsac-overlay/state.json")) + 1
    proc = second("revert", f"{after_phase}:full")
    point.problems += output_problems(proc, {0})
    assert owners() == [str(point.checkout)] and not state_dir(other).exists(), proc.stderr
    point.expect("applied", "the other checkout's apply and revert on a full disk")
    assert not point.problems, "\n".join(point.problems)
