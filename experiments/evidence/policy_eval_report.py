#!/usr/bin/env python3
"""README.md of a sim-to-sim results folder, generated from the ``policy_eval.py`` JSONs it holds.

``python experiments/evidence/policy_eval_report.py results/<folder>`` rewrites ``<folder>/README.md``; ``--check`` exits 1
when the committed README differs from what the JSONs give (the test suite runs it on committed folders).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from statistics import fmean, stdev
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

import parity_stats  # noqa: E402
from bench_configs import NEGATIVE_CONTROL  # noqa: E402
from mjwarp_report import ARM_LABELS, CONTROL_ARM as CONTROL  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2]
#: The arms (labels: ``mjwarp_report.ARM_LABELS``), in table order: MJWarp with the host-env collector, with
#: the device-resident one, the negative control on the device-resident one, CPU MuJoCo.
ARMS = {name: ARM_LABELS[name] for name in ("mjwarp", "mjwarp-device", CONTROL, "mujoco")}
#: In a folder: results folders (relative to the project root, one per line) whose evaluations it is compared
#: against, e.g. the committed CPU-MuJoCo-trained checkpoints' evaluations for a study of one MJWarp arm.
REFERENCES = "references.txt"


def arm(run: dict[str, Any]) -> str:
    """The training arm of an evaluation: the physics, for MJWarp the collector that trained it, and the negative
    control apart. The training run's configuration says which; an evaluation that predates its record is known
    by its run's name, which `device_evidence.sh sim2sim-train` gives as ``<arm>-<configuration>``."""
    t = run["checkpoint"]["trained"]
    name = f"{t['sim_backend']}-device" if t.get("collector") == "device" else t["sim_backend"]
    config = run.get("training", {}).get("config")
    control = config == NEGATIVE_CONTROL if config else str(run.get("label", "")).startswith(f"{name}-{NEGATIVE_CONTROL}")
    return f"{name}-{NEGATIVE_CONTROL}" if control else name


def load(folder: Path) -> list[dict[str, Any]]:
    """Every evaluation JSON of the folder and of its references, grouped by training setting, then by arm."""
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))]
    if not runs:
        raise ValueError(f"no policy_eval JSON in {folder}")
    listed = folder / REFERENCES
    for line in listed.read_text(encoding="utf-8").split() if listed.is_file() else []:
        found = sorted((PROJECT / line).glob("*.json"))
        if not found:
            raise ValueError(f"{listed}: no policy_eval JSON in {line}")
        runs += [{**json.loads(p.read_text(encoding="utf-8")), "_reference": line} for p in found]
    budgets = {json.dumps({k: r["args"][k] for k in ("task", "num_envs", "steps", "seeds")}) for r in runs}
    if len(budgets) > 1:
        raise ValueError(f"the evaluations in {folder} differ in task, envs, steps or seeds: {sorted(budgets)}")
    return sorted(runs, key=lambda r: (setting(r), list(ARMS).index(arm(r))))


def setting(run: dict[str, Any]) -> str:
    t = run["checkpoint"]["trained"]
    actor = t["updates_per_step"] // t["policy_frequency"]  # the benchmark's critic/actor/temperature schedule
    return f"{t['num_envs']} envs, batch {t['batch_size']}, {t['updates_per_step']}/{actor}/{actor}"


def pm(stats: dict[str, Any] | None, digits: int = 4) -> str:
    """``mean ± std (min … max)`` over evaluation seeds."""
    if stats is None:
        return "–"
    std = "" if stats["std"] is None else f" ± {stats['std']:.{digits}f}"
    return f"{stats['mean']:.{digits}f}{std} ({stats['min']:.{digits}f} … {stats['max']:.{digits}f})"


def results_table(runs: Sequence[dict[str, Any]]) -> str:
    header = ("| checkpoint | trained on | training setting | eval reward / env step, mean ± std over seeds (min … max) "
              "| completed episodes | episode return | episode length | falls / time-outs | training reward, last 100 "
              "iterations (training-time, own simulator) |")
    rows = [header, "|" + "---|" * 9]
    for r in runs:
        s, t = r["across_seeds"], r["checkpoint"]["trained"]
        falls, timeouts = (sum(seed[key] for seed in r["seeds"]) for key in ("terminated_episodes", "truncated_episodes"))
        training = r.get("training", {}).get("reward_last_mean")
        rows.append(f"| {r['label']} | {ARMS[arm(r)]} | {setting(r)} "
                    f"| {pm(s['reward_per_step'])} | {sum(x['completed_episodes'] for x in r['seeds'])} "
                    f"| {pm(s.get('episode_return_mean'), 2)} | {pm(s.get('episode_length_mean'), 1)} "
                    f"| {falls} / {timeouts} | {'–' if training is None else f'{training:.3f}'} |")
    return "\n".join(rows)


def _by_setting(runs: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """training setting → arm → the ``reward_per_step`` statistics of each checkpoint (one per training seed)."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in runs:
        out.setdefault(setting(r), {}).setdefault(arm(r), []).append(r["across_seeds"]["reward_per_step"])
    return out


def training_seeds(runs: Sequence[dict[str, Any]]) -> int:
    """The fewest checkpoints (training seeds) of one arm in one setting: what any verdict rests on."""
    return min(len(checkpoints) for sides in _by_setting(runs).values() for checkpoints in sides.values())


def _pair_row(name: str, w: list[dict[str, Any]], m: list[dict[str, Any]]) -> str:
    counts = f"{len(w)} · {len(m)}"
    if len(w) < 2 or len(m) < 2:
        stds = " · ".join("–" if x["std"] is None else f"{x['std']:.4f} (eval seeds)" for x in (w[0], m[0]))
        return (f"| {name} | {counts} | {fmean(x['mean'] for x in w) - fmean(x['mean'] for x in m):+.4f} "
                f"| {stds} | no verdict: one training seed a side |")
    w_means, m_means = [x["mean"] for x in w], [x["mean"] for x in m]
    interval = parity_stats.welch_interval(w_means, m_means)
    margin = parity_stats.MARGIN_FRACTION * abs(fmean(m_means))
    return (f"| {name} | {counts} | {interval.difference:+.4f}, 90% CI [{interval.low:+.4f}, "
            f"{interval.high:+.4f}] | {stdev(w_means):.4f} · {stdev(m_means):.4f} (training seeds) "
            f"| {'**yes**' if interval.inside(margin) else '**not shown**'} (±{margin:.4f}) |")


def pair_table(runs: Sequence[dict[str, Any]]) -> str:
    """Per training setting and MJWarp arm: MJWarp-trained minus MuJoCo-trained eval reward per step, and whether it is
    within seed noise (a row per MJWarp arm: the host-env collector's, then the device-resident one's).

    With one checkpoint a side there is no verdict: the spread shown is that over evaluation seeds of one policy.
    With two or more a side (training seeds), the rule, fixed before any multi-seed run: the 90 % Welch interval of
    the difference of the per-checkpoint means must lie inside ±15 % (``parity_stats.MARGIN_FRACTION``) of the
    MuJoCo-trained mean; the spread shown is over training seeds.
    """
    rows = ["| training setting | checkpoints (MJWarp · MuJoCo) | MJWarp-trained − MuJoCo-trained, eval reward / env step "
            "| spread (MJWarp · MuJoCo) | within seed noise |", "|---|---|---|---|---|"]
    for setting_name, sides in _by_setting(runs).items():
        for candidate in ("mjwarp", "mjwarp-device", CONTROL):
            if {candidate, "mujoco"} <= sides.keys():
                name = setting_name if candidate == "mjwarp" else f"{setting_name} · {ARMS[candidate]}"
                if candidate == CONTROL:
                    name += " (a trustworthy comparison does not find it within seed noise)"
                rows.append(_pair_row(name, sides[candidate], sides["mujoco"]))
    return "\n".join(rows)


def terms_table(runs: Sequence[dict[str, Any]]) -> str:
    """Per reward term: its weighted rate averaged over envs, steps and evaluation seeds."""
    names = sorted({k for r in runs for s in r["seeds"] for k in s["reward_term_rate_means"]})
    rows = ["| checkpoint | " + " | ".join(names) + " | penalty scale at the end |", "|" + "---|" * (len(names) + 2)]
    for r in runs:
        mean = {k: sum(s["reward_term_rate_means"].get(k, 0.0) for s in r["seeds"]) / len(r["seeds"]) for k in names}
        scales = [s["curriculum_last"].get("penalty_scaling/penalty_scale") for s in r["seeds"]]
        scale = " · ".join("–" if value is None else f"{value:.4f}" for value in scales)  # a task without one: –
        rows.append(f"| {r['label']} | " + " | ".join(f"{mean[k]:.3f}" for k in names) + f" | {scale} |")
    return "\n".join(rows)


def trained_where(runs: Sequence[dict[str, Any]]) -> str:
    """Where and how long each checkpoint was trained, from its run_config.json and training run JSON."""
    lines = []
    for r in runs:
        t, training = r["checkpoint"]["trained"], r.get("training", {})
        source = f" (evaluation from `{r['_reference']}`)" if "_reference" in r else ""
        lines.append(f"  - `{r['label']}`: {ARMS[arm(r)]} on "
                     f"{t['gpu'] or 'an unnamed GPU'}, {setting(r)}, training seed {t['seed']}, "
                     f"{training.get('iterations', '?')} iterations (update count {r['checkpoint']['update_count']}){source}")
    return "\n".join(lines)


def contract_note(runs: Sequence[dict[str, Any]]) -> str:
    """The contract check ran strict for every checkpoint only when each had its run config and strict was on."""
    strict = all(r["checkpoint"].get("trained") and all(s["env"]["sim2sim_strict"] for s in r["seeds"]) for r in runs)
    return f", strict, passed for all {len(runs)}" if strict else "; not strict or without a run config for some: see the JSONs"


def machines(runs: Sequence[dict[str, Any]]) -> str:
    """Each distinct evaluation machine, once (a folder with references may hold evaluations of two)."""
    seen: list[str] = []
    for r in runs:
        m = r["machine"]
        versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
        text = (f"{m['cpu']}, {m['cpus_usable']} usable CPUs, {m['platform']}, Python {m['python']}, torch on the "
                f"CPU; {versions}")
        if text not in seen:
            seen.append(text)
    return "; and ".join(seen)


def render(runs: Sequence[dict[str, Any]]) -> str:
    first = runs[0]
    args = first["args"]
    seeds = " ".join(str(s) for s in args["seeds"])
    wall = sum(s["wall_s"] for r in runs for s in r["seeds"])
    iterations = "/".join(sorted({str(r.get("training", {}).get("iterations", "?")) for r in runs}))
    fewest_seeds = training_seeds(runs)
    several = fewest_seeds >= 2
    scope = ("Each side holds several training seeds: the table below says, per training setting, whether the "
             "difference is within seed noise." if several else
             "This folder is a first measurement, **not** that claim: see the caveat.")
    caveat = (f"""## Seeds

Each side holds {fewest_seeds} or more checkpoints, one per training seed, of **{iterations} iterations**.
The verdict compares their per-checkpoint means: the 90 % Welch interval of MJWarp − MuJoCo must lie inside ±15 %
of the MuJoCo-trained mean (`pair_table`'s docstring). The ± in the results table is still the spread over
evaluation seeds of each policy.""" if several else f"""## Caveat: evaluation-seed spread only

Each side is **one training run** (one training seed) of **{iterations} iterations**. The ± above is the spread over
evaluation seeds of the same policy; it says how precisely each policy was measured, not how much two training
runs of the same configuration differ. "Within seed noise" needs several training seeds per side (the
training-seed spread); until then no difference or agreement between the MJWarp and the MuJoCo column is a
claim about the simulators.""")
    return f"""# Sim-to-sim: MJWarp-trained vs MuJoCo-trained FlashSAC policies, evaluated on CPU MuJoCo

The claim under test: a policy trained on MuJoCo Warp, evaluated on CPU MuJoCo (UniLab's sim-to-sim evaluation),
should reach a reward per env step within seed noise of a policy trained on CPU MuJoCo.
{scope}

Generated by `experiments/evidence/policy_eval_report.py` from the JSONs here (one per checkpoint, written by
`experiments/evidence/policy_eval.py`, whose docstring defines every number). Do not edit by hand.

## What ran

- **Checkpoints** (test data, not committed: path and sha256 in each JSON):
{trained_where(runs)}
- **Evaluation**: UniLab 1.3.2's own off-policy play path (`create_sac_playback_session`: the tree's actor built
  with the env's dims, the sim2sim contract check against each run's `run_config.json`{contract_note(runs)}),
  deterministic policy (tanh of the actor's mean), autoreset, observation noise and penalty curriculum as the
  task defines them.
- **Budget**: task `{args['task']}` (CPU MuJoCo) from the applied tree, {args['num_envs']} envs × {args['steps']}
  env steps × evaluation seeds {seeds}, the same for every checkpoint (the task's time limit,
  `env.max_episode_seconds` 20 s at `ctrl_dt` 0.02 s, is 1000 steps).
- **Machine** (as the JSONs record it): {machines(runs)} (wall times are not measurements:
  {wall / 60:.0f} min in total).

## Results

{results_table(runs)}

Completed episodes, return and length count only episodes that ended inside the window (a fall or the
time limit); falls are the env's terminations, time-outs its truncations. The training
reward is the collector's logged mean episode return during training (exploration noise on, curriculum at its
training-time level), on each run's **own** simulator; it is not comparable in level with the evaluation
columns, only between runs.

MJWarp-trained minus MuJoCo-trained, same training setting:

{pair_table(runs)}

Per reward term (weighted rate, before the `ctrl_dt` scaling; mean over envs, steps and seeds) and the penalty
curriculum's scale at the end of each seed's window:

{terms_table(runs)}

{caveat}

## Reproduce

From the applied tree with the task's assets unpacked, overlay first on `PYTHONPATH`:

```bash
python <project>/experiments/evidence/policy_eval.py --task {args['task']} --checkpoint <run>-actor.pt --run-config <run>-run_config.json \\
  --training-run <batch>/runs/<run>.json --num-envs {args['num_envs']} --steps {args['steps']} --seeds {seeds} \\
  --output results/<folder>/<run>.json
python <project>/experiments/evidence/policy_eval_report.py results/<folder>
```

A folder's `references.txt` names results folders whose evaluations it is compared against (the report reads them
in place; nothing is copied).
"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when README.md is stale")
    args = parser.parse_args(argv)
    try:
        text = render(load(args.folder))
    except (ValueError, KeyError, OSError) as exc:
        print(f"policy_eval_report: error: {exc!r}", file=sys.stderr)
        return 1
    readme = args.folder / "README.md"
    if args.check:
        if not readme.is_file() or readme.read_text(encoding="utf-8") != text:
            print(f"policy_eval_report: {readme} is stale; regenerate it", file=sys.stderr)
            return 1
        return 0
    readme.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
