#!/usr/bin/env python3
"""README of a device-env evidence folder, generated from its JSONs (``--check``: the committed one must agree).

A folder holds up to three kinds of records, each in its own subfolder:

- ``env-step/*.json``: ``device_env_bench.py`` runs (the env step alone: UniLab's host env, the device env as
  one CUDA graph and eager, the MJWarp substeps alone; alternating blocks on one GPU);
- ``trainings/*.json``: the ``run_summary.json`` of ``train_flashsac.py`` runs with ``training.collector=device``;
- ``bench-*/runs/*.json``: ``make bench`` run JSONs (their own ``summary.md`` beside them, from ``bench_report``).

The figures are rendered from those files; the text around them is ``NOTES`` below, where a folder says what
state of the code each record measured. Usage: ``device_env_report.py FOLDER [--check]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import run_files  # noqa: E402
from bench_configs import Schedule  # noqa: E402

TITLE = "# The device-resident G1 Walk Flat env and collector on MuJoCo Warp"


def _load(paths: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    return [(run_files.logical_name(path).removesuffix(".json"), run_files.read_json(path)) for path in sorted(paths)]


def env_step_table(records: list[tuple[str, dict[str, Any]]]) -> str:
    rows = ["| record | envs | host env ms | device env ms | device env, eager ms | MJWarp substeps alone ms | "
            "device ÷ host | device env steps/s | device step | host syncs in the device step |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in records:
        for run in data["runs"]:
            s = run["summary"]
            eager = s.get("device_env_eager_ms", {}).get("median")
            rows.append(
                f"| {name} | {run['num_envs']} | {s['host_env_ms']['median']:.2f} | {s['device_env_ms']['median']:.2f} | "
                f"{'–' if eager is None else f'{eager:.2f}'} | {s['device_physics_ms']['median']:.2f} | "
                f"{1 / run['speedup_device_over_host']:.2f} | {run['device_env_steps_per_s'] / 1e3:.1f} k | "
                f"{run.get('device_env_graph', 'eager')} | {run['device_env_host_sync']} |")
    return "\n".join(rows)


def kernel_split_table(folder: Path) -> str:
    """Where a device env step's GPU time goes (``device_env_bench.py --profile``), one row per env count: the
    step as one CUDA graph, the MuJoCo Warp substeps alone as one graph (the physics floor), and the kernels of
    eager steps split into MuJoCo Warp's and torch's (count and GPU time per step), with the largest kernel."""
    rows = ["| record | envs | device env step, one graph (ms) | MJWarp substeps alone, one graph (ms) | "
            "Warp kernels per step | Warp GPU ms per step | torch kernels per step | torch GPU ms per step | "
            "largest kernel (launches per step, GPU µs per step) |", "|---|---|---|---|---|---|---|---|---|"]
    for name, data in _load(sorted(folder.glob("*.json"))):
        for run in data["runs"]:
            profile = run["profile"]
            split, top = profile["eager_step_split"], profile["top_kernels"][0]
            rows.append(
                f"| {name} | {run['num_envs']} | {run['summary']['device_env_ms']['median']:.2f} | "
                f"{profile['physics_graph_ms']:.2f} | {split['warp']['kernels_per_step']:.0f} | "
                f"{split['warp']['gpu_ms_per_step']:.2f} | {split['torch']['kernels_per_step']:.0f} | "
                f"{split['torch']['gpu_ms_per_step']:.2f} | `{top['name'].split('__locals__')[0]}` "
                f"({top['per_step']:.1f}, {top['gpu_us_per_step']:.0f}) |")
    return "\n".join(rows)


def op_count_table(folder: Path) -> str:
    """Where a device env step's torch work is (``device_env_check.py --mode ops``): its compute operations per
    step by env method (on CUDA each launches at least one kernel into the step's graph), one column per record."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json"))) if data.get("mode") == "ops"]
    parts = list(dict.fromkeys(part for _, data in records for part in data["compute_ops_per_step_by_part"]))
    head = " | ".join(f"{data['num_envs']} envs ({data['device']})" for _, data in records)
    rows = [f"| compute operations per step | {head} | share |", "|---" * (len(records) + 2) + "|"]
    first = records[0][1] if records else {}
    for part in parts:
        values = " | ".join(f"{data['compute_ops_per_step_by_part'].get(part, 0):.0f}" for _, data in records)
        share = first["compute_ops_per_step_by_part"].get(part, 0) / first["compute_ops_per_step"]
        rows.append(f"| `{part}` | {values} | {100 * share:.0f} % |")
    totals = " | ".join(f"**{data['compute_ops_per_step']:.0f}**" for _, data in records)
    views = " | ".join(f"{data['views_per_step']:.0f}" for _, data in records)
    rows += [f"| all | {totals} | 100 % |", f"| views (no kernel), not counted above | {views} | |"]
    return "\n".join(rows)


def _equal(data: dict[str, Any]) -> str:
    """A side-by-side check's verdict: yes, or the first step at which something differed."""
    return "yes" if data["equal"] else f"no, from step {min(data['first_difference_step'].values())}"


def sensors_table(folder: Path) -> str:
    """The physics' sensors in the last substep only against every substep (``device_env_check.py --mode
    sensors``): whether every MuJoCo Warp array and env output stayed bitwise equal, and the Warp kernel
    launches per env step of each, one row per record."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json"))) if data.get("mode") == "sensors"]
    rows = ["| record | envs (device) | steps | done rows | arrays + outputs compared | bitwise equal | Warp launches "
            "per step, sensors in the last substep | in every substep | fewer |", "|---" * 9 + "|"]
    for name, data in records:
        launches = data["warp_launches_per_step"]
        last, every = launches["last_substep"], launches["every_substep"]
        rows.append(f"| {name} | {data['num_envs']} ({data['device']}) | {data['steps']} | {data['done_rows']} | "
                    f"{data['arrays_compared']} + {len(data['outputs_compared'])} | "
                    f"{_equal(data)} | "
                    f"{last:.1f} | {every:.1f} | {every - last:.1f} ({100 * (every - last) / every:.1f} %) |")
    return "\n".join(rows)


def sensor_stages_table(folder: Path) -> str:
    """The sensors without their acceleration stage against every stage in the last substep (``device_env_check.py
    --mode sensor-stages``): which arrays and outputs differed (the check allows the post-constraint RNE's only),
    the acceleration stage's sensors left out, and the Warp kernel launches per env step of each, one row per
    record."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json")))
               if data.get("mode") == "sensor-stages"]
    rows = ["| record | envs (device) | steps | done rows | arrays + outputs compared | differed (from step) "
            "| holds | acceleration-stage sensors left out | Warp launches per step, without them | with them "
            "| fewer |", "|---" * 11 + "|"]
    for name, data in records:
        launches = data["warp_launches_per_step"]
        default, every = launches["default"], launches["every_stage"]
        first = list(data["first_difference_step"].items())
        differed = ", ".join(f"`{key}` ({step})" for key, step in first[:6]) or "none"
        differed += f" and {len(first) - 6} more" if len(first) > 6 else ""
        rows.append(f"| {name} | {data['num_envs']} ({data['device']}) | {data['steps']} | {data['done_rows']} | "
                    f"{data['arrays_compared']} + {len(data['outputs_compared'])} | {differed} | "
                    f"{'yes' if data['holds'] else 'no'} | {len(data['acceleration_stage_sensors'])} | "
                    f"{default:.1f} | {every:.1f} | {every - default:.1f} ({100 * (every - default) / every:.1f} %) |")
    return "\n".join(rows)


def draws_ahead_table(folder: Path) -> str:
    """A device env taking each step's draws ahead against one taking them in the step (``device_env_check.py
    --mode draws-ahead``): whether every MuJoCo Warp array and env output stayed bitwise equal, how many of the
    step's compute operations are taken ahead, and how many draw operations ran inside the step's CUDA graph
    (none may), one row per record."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json"))) if data.get("mode") == "draws-ahead"]
    rows = ["| record | envs (device) | steps | done rows | arrays + outputs compared | bitwise equal "
            "| compute operations per step | taken ahead | by part | draw operations in the step's graph |",
            "|---" * 10 + "|"]
    for name, data in records:
        total, ahead = data["compute_ops_per_step"], data["compute_ops_drawn_ahead_per_step"]
        parts = ", ".join(f"`{part}` {count}" for part, count in data["drawn_ahead_by_part"].items())
        rows.append(f"| {name} | {data['num_envs']} ({data['device']}) | {data['steps']} | {data['done_rows']} | "
                    f"{data['arrays_compared']} + {len(data['outputs_compared'])} | {_equal(data)} | {total} | "
                    f"{ahead} ({100 * ahead / total:.0f} %) | {parts} | {data['draw_ops_in_step_graph']} |")
    return "\n".join(rows)


def fused_terms_table(folder: Path) -> str:
    """The env step's work around the physics as Warp kernels against the torch step, both run from the same state
    before every fused launch (``device_env_check.py --mode fused-terms``): the outputs of the work after the physics
    left bitwise, the largest reward and observation differences, the reset's arrays left bitwise, the verdict
    against the stated tolerances, and per form of the step (torch, fused, fused with the reset only on a step with
    a done row) one step's torch compute operations in the step's graph and Warp kernel launches, one row per
    record. Where a record has it, the arrays in which the torch reset run twice from one state differed from
    itself (MuJoCo Warp's atomic subtree sums on CUDA), with the largest difference."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json"))) if data.get("mode") == "fused-terms"]
    rows = ["| record | envs (device) | steps | done rows | after the physics: outputs bitwise | largest reward "
            "difference | largest observation difference (relative) | reset: arrays bitwise | within the tolerances "
            "| torch operations in the step's graph: torch · fused · fused, reset when done | Warp launches: torch · "
            "fused · fused, reset when done | torch reset run twice: arrays not bitwise (largest difference) |",
            "|---" * 12 + "|"]
    forms = ("torch", "fused", "fused, reset only when done")
    for name, data in records:
        bitwise, reset = data["bitwise"], data["reset"]["bitwise"]
        obs = max(value for key, value in data["max_rel_diff"].items() if key.endswith("obs"))
        counts = data["per_step"]
        ops = " · ".join(str(counts[form]["torch_compute_ops_in_step_graph"]) for form in forms) if counts else "–"
        launches = " · ".join(str(counts[form]["warp_launches"]) for form in forms) if counts else "–"
        verdict = "yes" if data["equal"] else "no, from step " + str(min(
            [*data["first_difference_step"].values(), *data["reset"]["first_difference_step"].values()]))
        twice = data.get("torch_run_to_run")
        spread = "–" if twice is None else (f"{len(twice)} ({max(twice.values()):.3g})" if twice else "0")
        rows.append(f"| {name} | {data['num_envs']} ({data['device']}) | {data['steps']} | {data['done_rows']} | "
                    f"{sum(bitwise.values())} of {len(bitwise)} | {data['max_abs_diff']['reward']:.3g} | {obs:.3g} | "
                    f"{sum(reset.values())} of {len(reset)} | {verdict} | {ops} | {launches} | {spread} |")
    return "\n".join(rows)


def forms_table(folder: Path) -> str:
    """The device env's step alone in its forms (``device_env_bench.py --forms``): per env count, each form's median
    milliseconds per step over alternating blocks and its ratio to the first form, one row per record and count;
    with ``--profile`` the MuJoCo Warp substeps alone as one graph (the physics floor) and the first form's eager
    step's Warp and torch kernels per step ("–" without it)."""
    records = [(name, data) for name, data in _load(sorted(folder.glob("*.json")))
               if data.get("study") == "device-env-forms"]
    forms = list(records[0][1]["runs"][0]["median_ms_per_step"]) if records else []
    rows = ["| record | GPU | envs | " + " | ".join(f"{form} ms (ratio)" for form in forms)
            + " | MJWarp substeps alone, one graph (ms) | first form's Warp / torch kernels per step |",
            "|---" * (5 + len(forms)) + "|"]
    for name, data in records:
        for run in data["runs"]:
            cells = " | ".join(f"{run['median_ms_per_step'][form]:.2f} ({run['ratio_to_first'][form]:.3f})"
                               for form in forms)
            profile = run.get("profile")
            split = profile["eager_step_split"] if profile else {}
            floor = (f"{profile['physics_graph_ms']:.2f} | {split['warp']['kernels_per_step']:.0f} / "
                     f"{split.get('torch', {}).get('kernels_per_step', 0):.0f}" if profile else "– | –")
            rows.append(f"| {name} | {data['machine']['gpu']} | {run['num_envs']} | {cells} | {floor} |")
    return "\n".join(rows)


def graph_split_table(folder: Path) -> str:
    """The env step's timestamps inside its replayed CUDA graph (``device_env_graph_check.py --mode split``): per
    record, whether it is the control, how many replays held (each row the next step, three positive parts within
    the replay's event time, the physics at least half), and the mean replay and parts (ms)."""
    rows = ["| record | GPU | envs | control: physics stamp before the physics | replays holding | replay (ms) | "
            "physics (ms) | terms (ms) | reset (ms) | holds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in _load(sorted(folder.glob("*.json"))):
        if data.get("mode") != "split":
            continue
        mean = data["mean_ms"]
        control = "yes" if data["misplaced_stamp_control"] else "no"
        rows.append(f"| {name} | {data['device']} | {data['num_envs']} | {control} | {data['steps_holding']} of "
                    f"{data['steps']} | {mean['replay_ms']:.2f} | {mean['env_physics']:.2f} | {mean['env_terms']:.2f} "
                    f"| {mean['env_reset']:.2f} | {'yes' if data['holds'] else 'no'} |")
    return "\n".join(rows)


def mass_constants_table(folder: Path) -> str:
    """``mass_constants_check.py`` records: per record, where it ran, the rows each recomputation left different from
    ``set_const``'s in each round (B called, C replayed from a conditional node with ``--capture``), the controls
    caught, the env's Data untouched, the launches, and the mean milliseconds of each."""
    rows = ["| record | device · worlds | C captured | rows differing from set_const, B · C, per round | "
            "controls caught | env Data changed | launches (tiled), set_const · recompute | "
            "ms, set_const · recompute | equal |",
            "|---|---|---|---|---|---|---|---|---|"]

    def differing(rows_of: dict[str, list[int]]) -> str:
        return ", ".join(f"{field} ({len(worlds)} worlds)" for field, worlds in rows_of.items()) or "none"

    for name, data in _load(sorted(folder.glob("*.json"))):
        if "launches" not in data or "rounds" not in data:
            continue
        rounds = "; ".join(f"{differing(r['B'])} · {differing(r['C'])}" for r in data["rounds"])
        launches = " · ".join(f"{c['total']} ({c['launch_tiled']})" for c in
                              (data["launches"]["set_const"], data["launches"]["recompute"]))
        ms = data.get("ms")
        ms_cell = f"{ms['set_const']:.2f} · {ms['recompute']:.2f}" if ms else "–"
        caught = sum(bool(rows_of) for rows_of in data["controls"].values())
        rows.append(f"| {name} | {data['device']} · {data['worlds']} | {'yes' if data['captured'] else 'no'} | "
                    f"{rounds} | {caught} of {len(data['controls'])} | {', '.join(data['data_changed']) or 'none'} | "
                    f"{launches} | {ms_cell} | {'yes' if data['equal'] else 'no'} |")
    return "\n".join(rows)


def twin_table(folder: Path) -> str:
    """The graphed step against the eager one (``device_env_graph_check.py --mode twin``): per record, the task, the
    control, the graph's status, each run's finished episodes (count, mean length, one-step episodes), the first
    step whose dones differ, and whether it holds."""
    rows = ["| record | GPU | task · envs · steps | control | graph | graphed: episodes · mean length · one-step | "
            "eager: episodes · mean length · one-step | first step the dones differ | holds |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, data in _load(sorted(folder.glob("*.json"))):
        if data.get("mode") != "twin":
            continue
        control = ("condition unset" if data["condition_unset_control"]
                   else "state bound anew" if data.get("rebind_state_control") else "no")

        def episodes(e: dict[str, Any]) -> str:
            mean = "–" if e["mean_length"] is None else f"{e['mean_length']:.2f}"
            return f"{e['count']:,} · {mean} · {e['one_step']:,}"

        first = data["first_step_dones_differ"]
        rows.append(f"| {name} | {data['device']} | {data['task']} · {data['num_envs']} · {data['steps']} | "
                    f"{control} | {data['graph_status']} | {episodes(data['episodes_graph'])} | "
                    f"{episodes(data['episodes_eager'])} | {'–' if first is None else first} | "
                    f"{'yes' if data['holds'] else 'no'} |")
    return "\n".join(rows)


def learner_beside_table(folder: Path) -> str:
    """The learner's graph beside the physics' graph (``learner_beside_physics_bench.py``): per setting and SM
    carveout of the learner's matrix products, the physics alone, the learner alone, both together (each stream's
    span and the iteration), and the physics' stretch beside the learner (medians over blocks, ms)."""
    rows = ["| record | GPU | envs · schedule | SMs left free | physics alone | learner alone | physics beside the "
            "learner | stretch | learner beside the physics | iteration |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, data in _load(sorted(folder.glob("*.json"))):
        if data.get("study") != "learner-beside-physics" or data.get("cpu_smoke"):
            continue
        schedule = Schedule(data["updates_per_step"], data["policy_frequency"]).label
        for carveout, arm in data["arms"].items():
            rows.append(f"| {name} | {data['machine']['gpu']} | {data['num_envs']} · {schedule} | "
                        f"{carveout if carveout != '0' else '0 (default)'} | {data['physics_alone_ms']:.2f} | "
                        f"{arm['learner_alone_ms']:.2f} | {arm['together_physics_ms']:.2f} | "
                        f"{arm['physics_stretch_ms']:+.2f} | {arm['together_learner_ms']:.2f} | "
                        f"{arm['together_iteration_ms']:.2f} |")
    return "\n".join(rows)


def determinism_lines(records: list[tuple[str, dict[str, Any]]]) -> str:
    lines = []
    for name, data in records:
        if data.get("parity"):
            p = data["parity"]
            lines.append(f"- {name}: the NumPy env and the device env with UniLab's draws, {p['num_envs']} envs x "
                         f"{p['steps']} steps on the GPU: first step over 1e-3 or with other dones "
                         f"{p['first_step_over_1e-3_or_done_mismatch']}, largest observation difference "
                         f"{p['max_abs_diff']['policy_obs']:.3g}.")
        twice = (data.get("determinism") or {}).get("numpy_env_twice")
        if twice:
            lines.append(f"- {name}: UniLab's NumPy env twice on the GPU, same seed and actions: observations differ "
                         f"from step {twice['first_step_differing']} (largest {twice['max_abs_diff']:.3g}).")
    return "\n".join(lines)


def training_table(records: list[tuple[str, dict[str, Any]]]) -> str:
    rows = ["| record | iterations | wall ms per iteration (final) | env steps/s (final) | env step ms | learner ms | "
            "host syncs per iteration | launch to training start s |", "|---|---|---|---|---|---|---|---|"]
    for name, s in records:
        phases = s["collector_phases_ms"]
        rows.append(
            f"| {name} | {s['completed_iterations']} | {s['final_cycle_wall_ms']:.1f} | "
            f"{s['final_env_steps_per_sec'] / 1e3:.1f} k | {phases['env_step']:.1f} | {phases['learner']:.1f} | "
            f"{s['host_syncs_per_iteration']:.2f} | {s['wall_time_sec'] - s['training_wall_time_sec']:.0f} |")
    return "\n".join(rows)


def bench_lines(folder: Path) -> str:
    """Per ``bench-*`` folder: bench_report's collectors table of its completed runs, then a line per run."""
    import bench_report

    lines = []
    for sub in sorted(p for p in folder.glob("bench-*") if p.is_dir()):
        runs = _load(run_files.json_files(sub / "runs"))
        completed = [run for _, run in runs if run["status"] == "completed"]
        lines += [f"### `{sub.name}`", ""]
        if completed:
            lines += [bench_report.collector_table(completed), ""]
        for name, run in runs:
            startup = (run.get("warmup") or {}).get("startup_to_first_iteration_s")
            detail = "completed" if run["status"] == "completed" else f"{run['status']}: {run.get('error')}"
            if startup is not None:
                detail += f", first iteration {startup:.0f} s after launch"
            lines.append(f"- `{sub.name}/runs/{name}.json` ({run['backend']}, {run['collector']} collector, "
                         f"setting {run['setting']}, series `{run['series_sha256'][:12]}`): {detail}")
        lines += [f"- `{sub.name}/summary.md`: bench_report's tables of those runs.", ""]
    return "\n".join(lines).rstrip()


def machine_line(records: list[tuple[str, dict[str, Any]]]) -> str:
    data = records[0][1]
    m, v = data["machine"], data["versions"]
    versions = ", ".join(f"{k} {v[k]}" for k in sorted(v))
    return (f"Machine: {m['gpu']}, {m['cpu_count']} CPU cores ({data['date']}). Versions: {versions}. torch "
            f"{v['torch']} is drift from the pinned 2.8.0+cu128 (the lent machines bring it).")


def render(folder: Path) -> str:
    env = _load(list((folder / "env-step").glob("*.json")))
    trainings = _load(run_files.json_files(folder / "trainings"))
    notes = json.loads((folder / "notes.json").read_text())
    parts = [TITLE, "", notes["intro"], "", machine_line(env), "", "## The env step alone", "", notes["env_step"], "",
             env_step_table(env), "", determinism_lines(env), "", "## Training with the device collector", "",
             notes["trainings"], "", training_table(trainings), "", "## make bench runs", "", notes["bench"], "",
             bench_lines(folder), "", "## What these figures do not show", "", notes["open"], ""]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = render(args.folder)
    readme = args.folder / "README.md"
    if args.check:
        if not readme.is_file() or readme.read_text() != text:
            print(f"device_env_report: {readme} disagrees with its JSONs (run device_env_report.py {args.folder})",
                  file=sys.stderr)
            return 1
        return 0
    readme.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
