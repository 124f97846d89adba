"""CPU tests of the uni_rl learner patches of the series (patches/uni_rl/*.patch).

Everything that imports ``uni_rl`` runs in a subprocess with the patched (or pristine)
root first on ``sys.path``: the test process itself may hold the installed unilab-rl
1.4.0, and one interpreter must never mix two ``uni_rl`` versions. Each snippet prints
one JSON object that the test asserts on.
"""

from __future__ import annotations

import ast
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import PROJECT
from snippets import run_snippet

SWITCHES = ("compile_full_objectives", "finite_guard", "deferred_metrics", "aligned_products", "combo_kernels")

def test_series_patches_the_learner_files(
    pristine_uni_rl_root: Path, patched_uni_rl_root: Path
) -> None:
    pristine = pristine_uni_rl_root / "uni_rl"
    patched = patched_uni_rl_root / "uni_rl"
    assert (patched_uni_rl_root / "flashsac_runtime/learner/deferred_metrics.py").is_file()  # placed beside it
    for rel in (
        "algos/flash_sac/learner.py",
        "algos/flash_sac/update.py",
        "algos/flash_sac/double_buffer.py",
        "algos/common/normalization.py",
        "offpolicy/double_buffer_runner.py",
        "ipc/replay_pipelines/gpu_resident.py",
    ):
        assert (pristine / rel).read_bytes() != (patched / rel).read_bytes(), rel


def test_numerics_cpu_mode_passes(
    pristine_uni_rl_root: Path, patched_uni_rl_root: Path, tmp_path: Path
) -> None:
    output = tmp_path / "numerics.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(PROJECT / "experiments" / "evidence" / "validate_numerics.py"),
            "--baseline-root",
            str(pristine_uni_rl_root),
            "--patched-root",
            str(patched_uni_rl_root),
            "--mode",
            "cpu",
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["passed"] is True
    checks = report["checks"]
    measurements = report["measurements"]
    assert measurements["critic_updates"] >= 20 and measurements["actor_updates"] >= 10
    assert sorted(checks) == sorted((
        "eager_switches_off_vs_baseline",
        "eager_warm_up_guard_deferred_vs_baseline",
        "frozen_critic_actor_update",
        "finite_guard_injection",
        "finite_guard_recovery",
        "checkpoint_resume_keeps_graphs",
    ))
    for name, check in checks.items():
        assert check["passed"] is True, name
    assert checks["eager_switches_off_vs_baseline"]["state"]["max_abs_diff"] == 0.0
    # The unguarded baseline is really damaged by the same injection: the check can fail.
    assert checks["finite_guard_injection"]["unguarded_baseline_final_parameters_finite"] is False
    assert report["drift"]["torch"] is None or "ran" in report["drift"]["torch"]


def test_actor_update_leaves_critic_grads_none(
    pristine_uni_rl_root: Path, patched_uni_rl_root: Path
) -> None:
    body = """
    l = learner()
    b = batch(1)
    l.update_critic(b)
    for p in l.critic.parameters():
        p.grad = None
    calls = [0]
    original = torch.Tensor.requires_grad_
    def counting(self, requires_grad=True):
        calls[0] += 1
        return original(self, requires_grad)
    torch.Tensor.requires_grad_ = counting
    try:
        l.update_actor(b)
    finally:
        torch.Tensor.requires_grad_ = original
    print(json.dumps({
        "critic_grads_none": all(p.grad is None for p in l.critic.parameters()),
        "critic_requires_grad": all(p.requires_grad for p in l.critic.parameters()),
        "actor_grads": all(p.grad is not None for p in l.actor.parameters()),
        "toggles": calls[0],
    }))
    """
    patched = run_snippet(patched_uni_rl_root, body)
    assert patched == {
        "critic_grads_none": True,
        "critic_requires_grad": True,
        "actor_grads": True,
        "toggles": 0,
    }
    # 1.3.2 toggled requires_grad on every critic parameter twice per actor update.
    assert run_snippet(pristine_uni_rl_root, body)["toggles"] > 0


def test_objectives_trace_to_one_graph_each(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        l = learner(finite_guard=True, deferred_metrics=True)
        b = batch(2)
        c, a = l._critic_inputs(b), l._actor_inputs(b)
        out = {}
        for name, fn, args in (
            ("critic", l._critic_objective_eager, [c[k] for k in ("actions", "rewards", "next_obs",
             "dones", "truncated", "critic", "next_critic")]),
            ("actor", l._actor_objective_eager, [a[k] for k in ("obs", "next_obs", "actions", "critic")]),
        ):
            e = torch._dynamo.explain(fn)(*args)
            out[name] = [e.graph_count, e.graph_break_count]
        print(json.dumps(out))
        """,
    )
    assert result == {"critic": [1, 0], "actor": [1, 0]}


def test_metrics_buffer_semantics(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        import statistics
        from flashsac_runtime.learner.deferred_metrics import DeferredMetricsBuffer
        buf = DeferredMetricsBuffer({"critic": ("loss", "std"), "actor": ("a",)}, "cpu", capacity=2)
        empty = buf.read()
        source = torch.tensor(1.5)
        values = [[0.1, 2.0], [0.7, 3.0], [0.3, 5.0]]  # three rows: more than the capacity
        for loss, std in values:
            source.fill_(loss)
            buf.record("critic", [source, torch.tensor([std])])
        source.fill_(99.0)  # rows are copies: later writes to a source do not reach them
        buf.record("actor", [torch.tensor(4.0, requires_grad=True) * 1])
        pending = buf.pending("critic").tolist()
        first = buf.read()
        second = buf.read()
        try:
            buf.record("actor", [torch.tensor(1.0), torch.tensor(2.0)])
            arity = "accepted"
        except ValueError:
            arity = "rejected"
        expected = {
            "loss": statistics.mean(float(torch.tensor(v[0])) for v in values),
            "std": statistics.mean(v[1] for v in values),
            "a": 4.0,
        }
        print(json.dumps({"empty": empty, "first": first, "expected": expected, "second": second,
                          "capacity": buf.capacity, "pending_rows": len(pending), "arity": arity}))
        """,
    )
    assert result["empty"] == {}
    assert result["first"] == result["expected"]  # exact: the runner's statistics.mean
    assert result["second"] == {}  # a read consumes the rows
    assert result["capacity"] >= 3 and result["pending_rows"] == 3
    assert result["arity"] == "rejected"


def test_deferred_learner_metrics_equal_per_update_metrics(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        import statistics
        from collections import defaultdict
        runs = {}
        for deferred in (False, True):
            l = learner(finite_guard=True, deferred_metrics=deferred)
            collected = defaultdict(list)
            for i in range(3):
                b = batch(10 + i)
                returned = [l.update_critic(b)]
                if i % 2 == 0:
                    returned.append(l.update_actor(b))
                l.soft_update_target()
                for metrics in returned:
                    for k, v in metrics.items():
                        collected[k].append(v)
            if deferred:
                assert not collected, collected  # nothing read per update
                runs["deferred"] = l.read_deferred_metrics()
            else:
                runs["immediate"] = {k: statistics.mean(v) for k, v in collected.items()}
        print(json.dumps(runs))
        """,
    )
    assert result["deferred"] == result["immediate"]
    assert result["deferred"]["critic_skip_rate"] == 0.0


def test_finite_guard_skip_leaves_parameters_unchanged(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        l = learner(finite_guard=True, deferred_metrics=True)
        l.update_critic(batch(1)); l.update_actor(batch(1)); l.soft_update_target()
        l.read_deferred_metrics()
        before = state(l)
        poisoned = batch(2)
        poisoned["rewards"][::5] = float("nan")
        poisoned["rewards"][1] = float("inf")
        l.update_critic(poisoned)
        l.soft_update_target()
        bad_critic = l.read_deferred_metrics()
        after_critic = state(l)
        poisoned = batch(3)
        poisoned["critic"][0, 0] = float("nan")
        l.update_actor(poisoned)
        bad_actor = l.read_deferred_metrics()
        after_actor = state(l)
        l.update_critic(batch(4)); l.update_actor(batch(4)); l.soft_update_target()
        recovered = state(l)
        weights = ("critic.", "target_critic.", "critic_optimizer.")
        print(json.dumps({
            # Running statistics included (uni_rl 0003): a skipped step leaves all of it.
            "critic_unchanged": same(before, after_critic, weights),
            "critic_skip_rate": bad_critic["critic_skip_rate"],
            "actor_unchanged": same(after_critic, after_actor, ("actor.", "actor_optimizer.")),
            "actor_skip_rate": bad_actor["actor_skip_rate"],
            "temperature_skip_rate": bad_actor["temperature_skip_rate"],
            "finite_steps_move_again": not same(after_actor, recovered, ("critic.", "actor.")),
            "all_finite": all(bool(torch.isfinite(v).all()) for v in recovered.values()
                              if v.is_floating_point()),
        }))
        """,
    )
    assert result == {
        "critic_unchanged": True,
        "critic_skip_rate": 1.0,
        "actor_unchanged": True,
        "actor_skip_rate": 1.0,
        "temperature_skip_rate": 0.0,
        "finite_steps_move_again": True,
        "all_finite": True,
    }


# One NaN in one replayed field, then clean batches (uni_rl 0003). Run per field: which
# steps the poison skips, whether the skipped steps left every piece of state (running
# statistics included) bitwise as it was, and whether the next clean batch trains.
RECOVERY = """
from uni_rl.algos.flash_sac.learner import running_statistics

def skips(metrics):
    return {k: v for k, v in metrics.items() if k.endswith("skip_rate")}

def cycle(l, b):
    l.update_critic(b); l.update_actor(b); l.soft_update_target()
    return skips(l.read_deferred_metrics())

def recovery(fields, disable_restore=False, **switches):
    out = {}
    for field in fields:
        l = learner(finite_guard=True, deferred_metrics=True, **switches)
        if disable_restore:  # negative control: the guard without its statistics restore
            for kind in ("critic", "actor", "normalizer"):
                setattr(l, f"_guarded_restore_{kind}_statistics", lambda *args: None)
        cycle(l, batch(1)); cycle(l, batch(2))
        before = state(l)
        poisoned = batch(3)
        poisoned[field][5, 2] = float("nan")
        bad = cycle(l, poisoned)
        after = state(l)
        skipped = {"critic": ("critic.", "target_critic.", "critic_optimizer."),
                   "actor": ("actor.", "actor_optimizer.")}
        unchanged = {kind: same(before, after, prefixes) for kind, prefixes in skipped.items()
                     if bad[f"{kind}_skip_rate"] == 1.0}
        stats = running_statistics(l.actor, l.critic, l.target_critic)
        clean = [cycle(l, batch(4 + i)) for i in range(2)]
        actions = l.actor.explore(batch(9)["obs"])
        out[field] = {
            "poisoned_skips": bad,
            "skipped_steps_left_state_bitwise": unchanged,
            "statistics_finite_after_skip": all(bool(torch.isfinite(t).all()) for t in stats),
            "clean_skips": clean,
            "explore_finite": bool(torch.isfinite(actions).all()),
        }
    return out
"""
FIELDS = ("obs", "next_obs", "actions", "critic")
# The steps each poisoned field must skip: the critic objective reads next_obs (through the
# actor), actions and critic inputs; the actor objective reads obs and next_obs, and the
# critic input through the frozen critic; the temperature loss reads the actor's entropy.
EXPECTED_SKIPS = {
    "obs": {"critic_skip_rate": 0.0, "actor_skip_rate": 1.0, "temperature_skip_rate": 1.0},
    "next_obs": {"critic_skip_rate": 1.0, "actor_skip_rate": 1.0, "temperature_skip_rate": 1.0},
    "actions": {"critic_skip_rate": 1.0, "actor_skip_rate": 0.0, "temperature_skip_rate": 0.0},
    "critic": {"critic_skip_rate": 1.0, "actor_skip_rate": 1.0, "temperature_skip_rate": 0.0},
}
CLEAN = {"critic_skip_rate": 0.0, "actor_skip_rate": 0.0, "temperature_skip_rate": 0.0}


def _assert_recovered(result: dict[str, Any], fields: tuple[str, ...]) -> None:
    for field in fields:
        item = result[field]
        assert item["poisoned_skips"] == EXPECTED_SKIPS[field], field
        skipped = {kind for kind in ("critic", "actor") if EXPECTED_SKIPS[field][f"{kind}_skip_rate"]}
        assert item["skipped_steps_left_state_bitwise"] == dict.fromkeys(skipped, True), field
        assert item["statistics_finite_after_skip"] is True, field
        assert item["clean_skips"] == [CLEAN, CLEAN], field
        assert item["explore_finite"] is True, field


def test_one_bad_batch_does_not_stop_learning(patched_uni_rl_root: Path) -> None:
    """Per-update path on CPU: each poisoned field skips its steps, leaves all state, then training resumes.

    Negative control: with the statistics restore disabled (the guard without its statistics restore) the
    same NaN observation leaves NaN running statistics, the actor step is skipped on every
    later clean batch and the collector's actions are NaN.
    """
    result = run_snippet(patched_uni_rl_root, RECOVERY + f"print(json.dumps(recovery({FIELDS!r})))")
    _assert_recovered(result, FIELDS)
    broken = run_snippet(
        patched_uni_rl_root, RECOVERY + "print(json.dumps(recovery(('obs',), disable_restore=True)))"
    )["obs"]
    assert broken["statistics_finite_after_skip"] is False
    assert all(clean["actor_skip_rate"] == 1.0 for clean in broken["clean_skips"])
    assert broken["explore_finite"] is False


@pytest.mark.extended  # a real Inductor compile on the CPU (cold: about a minute on two cores)
def test_one_bad_batch_does_not_stop_learning_compiled(patched_uni_rl_root: Path) -> None:
    """The same on the full-objective compiled path (Inductor's C++ backend on CPU).

    The learner's CUDA-only compile gate is lifted as validate_numerics' ``compile_on_cpu``
    does, so the compiled objectives and the compiled guarded restore run; the
    observation and critic-input cases cover a skipped actor step and a skipped critic step.
    """
    fields = ("obs", "critic")
    body = (
        "import uni_rl.algos.flash_sac.learner as learner_module\n"
        "learner_module.get_torch_compile_for_cuda = lambda device, warn=False: torch.compile\n"
        + RECOVERY
        + f"r = recovery({fields!r}, use_compile=True, compile_full_objectives=True)\n"
        "l = learner(use_compile=True, compile_full_objectives=True, finite_guard=True)\n"
        "r['compiled'] = l.compile_full_objectives and l._guarded_restore_critic_statistics != "
        "l._guarded_restore_critic_statistics_eager\n"
        "print(json.dumps(r))"
    )
    result = run_snippet(patched_uni_rl_root, body)
    assert result.pop("compiled") is True
    _assert_recovered(result, fields)


# Checkpoints across versions and devices (uni_rl 0005). ``device_rates`` gives the learner
# the CUDA graph paths' learning rates, 0-d tensors that the schedulers fill in place and
# captured graphs read (FlashSACLearner._use_device_learning_rates, which the constructor
# calls on CUDA with manual or whole-cycle graphs); on the CPU they are CPU tensors.
CHECKPOINT = """
SCHEDULE = dict(learning_rate_init=1e-4, learning_rate_peak=3e-4, learning_rate_end=1.5e-4,
                learning_rate_warmup_steps=4, learning_rate_decay_steps=40)
OPTIMIZERS = ("actor_optimizer", "critic_optimizer", "temperature_optimizer")

def make(device_rates=False):
    l = learner(**SCHEDULE)
    if device_rates:
        l._use_device_learning_rates()
    return l

def cycle(l, i):
    torch.manual_seed(100 + i)
    l.update_critic(batch(i)); l.update_actor(batch(i)); l.soft_update_target()

def rates(l):
    return [float(g["lr"]) for name in OPTIMIZERS for g in getattr(l, name).param_groups]

def rate_types(sd):
    groups = [g for name in OPTIMIZERS for g in sd[name]["param_groups"]]
    last = [v for name in ("actor_scheduler", "critic_scheduler") for v in sd[name]["_last_lr"]]
    return sorted({type(v["lr"]).__name__ for v in groups} | {type(v).__name__ for v in last})
"""


def test_checkpoints_are_portable_between_1_3_2_and_patched(
    pristine_uni_rl_root: Path, patched_uni_rl_root: Path, tmp_path: Path
) -> None:
    """1.3.2 -> patched with device rates -> 1.3.2, and a resumed run equals the uninterrupted one.

    Negative controls: torch's own ``optimizer.load_state_dict`` of the same 1.3.2
    checkpoint replaces the device rate with a float (the defect), and the optimizer's raw
    ``state_dict()`` of a device-rate learner holds tensors where 1.3.2 saves floats.
    """
    old, mid, new = (tmp_path / name for name in ("unilab_rl_1_3_2.pt", "mid.pt", "patched.pt"))
    saved_old = run_snippet(pristine_uni_rl_root, CHECKPOINT + f"""
l = make()
for i in range(3):
    cycle(l, i)
torch.save(l.get_state_dict(), {str(old)!r})
print(json.dumps({{"rates": rates(l), "types": rate_types(l.get_state_dict())}}))
""")
    assert saved_old["types"] == ["float"]
    patched = run_snippet(patched_uni_rl_root, CHECKPOINT + f"""
reference = make(device_rates=True)
for i in range(3):
    cycle(reference, i)
torch.save(reference.get_state_dict(), {str(mid)!r})
cycle(reference, 3)
resumed = make(device_rates=True)
resumed.load_state_dict(torch.load({str(mid)!r}, weights_only=True))
cycle(resumed, 3)
l = make(device_rates=True)
tensors = [g["lr"] for name in OPTIMIZERS for g in getattr(l, name).param_groups]
l.load_state_dict(torch.load({str(old)!r}, weights_only=True))
after_load = [g["lr"] for name in OPTIMIZERS for g in getattr(l, name).param_groups]
loaded_rates = rates(l)
cycle(l, 3)  # the scheduler's next rate must reach the same tensors
raw = make(device_rates=True)
raw_tensor = raw.critic_optimizer.param_groups[0]["lr"]
raw.critic_optimizer.load_state_dict(torch.load({str(old)!r}, weights_only=True)["critic_optimizer"])
torch.save(l.get_state_dict(), {str(new)!r})
print(json.dumps({{
    "kept": len(after_load) == len(tensors) and all(a is b for a, b in zip(after_load, tensors)),
    "loaded_rates": loaded_rates,
    "rates_after_step": rates(l),
    "scheduler_after_step": [float(s.get_last_lr()[0]) for s in
                             (l.actor_scheduler, l.critic_scheduler, l.temperature_scheduler)],
    "resumed_equal": same(state(reference), state(resumed), ("actor", "critic", "target_critic", "temperature")),
    "saved_types": rate_types(l.get_state_dict()),
    "raw_state_dict_types": sorted({{type(g["lr"]).__name__ for g in l.critic_optimizer.state_dict()["param_groups"]}}),
    "torch_load_keeps_tensor": raw.critic_optimizer.param_groups[0]["lr"] is raw_tensor,
}}))
""")
    assert patched["kept"] is True
    assert patched["loaded_rates"] == pytest.approx(saved_old["rates"], rel=1e-6)
    assert patched["rates_after_step"] == pytest.approx(patched["scheduler_after_step"], rel=1e-6)
    assert patched["rates_after_step"] != pytest.approx(patched["loaded_rates"])  # the schedule moved
    assert patched["resumed_equal"] is True
    assert patched["saved_types"] == ["float"]
    assert patched["raw_state_dict_types"] == ["Tensor"]  # what a raw save would write
    assert patched["torch_load_keeps_tensor"] is False  # the defect that uni_rl 0005 works around
    back = run_snippet(pristine_uni_rl_root, CHECKPOINT + f"""
l = make()
l.load_state_dict(torch.load({str(new)!r}, weights_only=True))  # CPU tensors and floats only
loaded = rates(l)
cycle(l, 4)
print(json.dumps({{"types": sorted({{type(g["lr"]).__name__ for n in OPTIMIZERS for g in getattr(l, n).param_groups}}),
                   "loaded": loaded, "finite": all(bool(torch.isfinite(p).all()) for p in l.actor.parameters())}}))
""")
    assert back == {"types": ["float"], "loaded": patched["rates_after_step"], "finite": True}


def test_checkpoint_keeps_the_loading_learners_optimizer_flags(patched_uni_rl_root: Path) -> None:
    """A checkpoint's fused/capturable flags (another device's) do not replace the learner's own.

    The checkpoint is a real CPU learner's, with its param groups marked as a CUDA learner
    writes them (fused, capturable); loaded into a CPU learner, the groups stay the CPU
    learner's and it keeps training. Negative control: torch's plain load takes the flags.
    """
    result = run_snippet(patched_uni_rl_root, CHECKPOINT + """
import copy
source = make()
cycle(source, 0)
sd = source.get_state_dict()
for name in OPTIMIZERS:
    for group in sd[name]["param_groups"]:
        group.update(fused=True, capturable=True)
l = make()
own = [{k: g[k] for k in ("foreach", "fused", "capturable", "differentiable")} for g in l.critic_optimizer.param_groups]
l.load_state_dict(copy.deepcopy(sd))
kept = [{k: g[k] for k in ("foreach", "fused", "capturable", "differentiable")} for g in l.critic_optimizer.param_groups]
cycle(l, 1)
plain = make()
plain.critic_optimizer.load_state_dict(copy.deepcopy(sd)["critic_optimizer"])
print(json.dumps({"kept": kept == own, "trained": all(bool(torch.isfinite(p).all()) for p in l.critic.parameters()),
                  "plain_takes_flags": plain.critic_optimizer.param_groups[0]["capturable"]}))
""")
    assert result == {"kept": True, "trained": True, "plain_takes_flags": True}


def test_warm_up_restores_every_piece_of_state(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        l = learner(finite_guard=True, deferred_metrics=True)
        l.update_reward_stats(torch.randn(2, 8), torch.zeros(2, 8))
        l.update_critic(batch(1)); l.update_actor(batch(1)); l.soft_update_target()
        l.read_deferred_metrics()
        before = state(l)
        rms = [t.clone() for t in (l.reward_normalizer.rms.var, l.reward_normalizer.g_r)]
        lrs = [g["lr"] for o in (l.actor_optimizer, l.critic_optimizer) for g in o.param_groups]
        epochs = [s.last_epoch for s in (l.actor_scheduler, l.critic_scheduler)]
        rng = torch.random.get_rng_state()
        dry = {k: torch.zeros_like(v) for k, v in batch(0).items()}
        l.warm_up(dry, inference_obs=dry["obs"])
        after = state(l)
        print(json.dumps({
            "state": sorted(before) == sorted(after) and all(torch.equal(before[k], after[k]) for k in before),
            "normalizer": all(torch.equal(a, b) for a, b in zip(rms, (l.reward_normalizer.rms.var, l.reward_normalizer.g_r))),
            "lrs": lrs == [g["lr"] for o in (l.actor_optimizer, l.critic_optimizer) for g in o.param_groups],
            "schedulers": epochs == [s.last_epoch for s in (l.actor_scheduler, l.critic_scheduler)],
            "rng": torch.equal(rng, torch.random.get_rng_state()),
            "metrics": l.read_deferred_metrics(),
        }))
        """,
    )
    assert result == {
        "state": True,
        "normalizer": True,
        "lrs": True,
        "schedulers": True,
        "rng": True,
        "metrics": {},
    }


def test_warm_up_compiles_with_a_wide_pool_then_restores_the_budget(patched_uni_rl_root: Path) -> None:
    """uni_rl 0005: the runner's warm-up compiles with every CPU; training keeps the thread budget's pool.

    The pool itself is run here. That the runner's warm-up enters it stays a source check
    of ``_learner_warm_up`` (GPU-only behaviour): the runner refuses a CPU learner device,
    and on CPU the learner turns ``use_compile`` off, so the warm-up returns before it
    would compile anything; the H200 runs log its compile workers at the warm-up.
    """
    result = run_snippet(
        patched_uni_rl_root,
        """
        import inspect
        import torch._inductor.config as inductor_config
        from torch._inductor import async_compile
        from uni_rl.algos.common.compile import wide_compile_pool
        from uni_rl.offpolicy import double_buffer_runner
        from flashsac_runtime.collector import runner as device_runner
        inductor_config.compile_threads = 1  # what the thread budget sets on a 16-core machine
        with wide_compile_pool(2) as inside_workers:
            inside = inductor_config.compile_threads
            pools_inside = len(async_compile._pool_set)
        narrow = []
        with wide_compile_pool(1) as workers:
            narrow.append(workers)
        print(json.dumps({
            "inside": [inside, inside_workers, pools_inside],
            "after": [inductor_config.compile_threads, len(async_compile._pool_set)],
            "not_narrowed": [narrow[0], inductor_config.compile_threads],
            "runner_uses_it": "with wide_compile_pool()" in inspect.getsource(double_buffer_runner.warm_up_learner)
                and all("warm_up_learner(" in inspect.getsource(method) for method in (
                    double_buffer_runner.DoubleBufferOffPolicyRunner._learner_warm_up,
                    device_runner.DeviceCollectorRunner._learn)),
        }))
        """,
    )
    assert result == {"inside": [2, 2, 1], "after": [1, 0], "not_narrowed": [1, 1], "runner_uses_it": True}


def test_config_keys_exist_with_intended_defaults(patched_unilab_root: Path) -> None:
    from hydra import compose, initialize_config_dir

    conf = patched_unilab_root / "src" / "unilab" / "conf" / "flashsac"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        params = compose("config").algo.algo_params
        assert params.use_compile is True
        assert params.compile_full_objectives is True
        assert params.finite_guard is True
        assert params.deferred_metrics is True
        assert params.use_cuda_graph_critic is False and params.use_cuda_graph_actor is False
        assert params.use_whole_cycle_cuda_graph is True  # the recommended default
        assert params.aligned_products is True  # measured on a GPU: numerics gate and learning parity held
        assert params.combo_kernels is True  # measured on a GPU: numerics gate and learning parity held
        # The four configurations of the original report, from the command line alone:
        # each turns the whole-cycle graph off, as the config's comment says.
        off = "algo.algo_params.use_whole_cycle_cuda_graph=false"
        selections = {
            "whole_iteration_graph": [],
            "eager": [off, "algo.algo_params.use_compile=false"],
            "loss_only_compile": [off, "algo.algo_params.compile_full_objectives=false"],
            "full_objective_compile": [off],
            "full_objective_compile_manual_graphs": [
                off,
                "algo.algo_params.use_cuda_graph_critic=true",
                "algo.algo_params.use_cuda_graph_actor=true",
            ],
        }
        chosen = {}
        for name, overrides in selections.items():
            p = compose("config", overrides=overrides).algo.algo_params
            chosen[name] = (
                p.use_compile,
                p.compile_full_objectives,
                p.use_cuda_graph_critic and p.use_cuda_graph_actor,
                p.use_whole_cycle_cuda_graph,
            )
    assert chosen == {
        "whole_iteration_graph": (True, True, False, True),
        "eager": (False, True, False, False),
        "loss_only_compile": (True, False, False, False),
        "full_objective_compile": (True, True, False, False),
        "full_objective_compile_manual_graphs": (True, True, True, False),
    }


def test_builder_reads_switches_with_1_3_2_defaults(patched_uni_rl_root: Path) -> None:
    """A config without the keys must still build: each key is read with .get(key, False).

    A source check (an AST scan of the builder's ``.get`` calls) because building is
    GPU-only: ``build_flashsac_double_buffer_runner`` refuses a CPU learner device in its
    first line and builds an environment and the runner's device replay before returning.
    What the learner does with each switch off is checked by running it (below, and the
    numerics CPU mode: switches off is bitwise 1.3.2).
    """
    source = (patched_uni_rl_root / "uni_rl/algos/flash_sac/double_buffer.py").read_text()
    reads = {}
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and len(node.args) == 2
            and isinstance(node.args[0], ast.Constant)
        ):
            reads[node.args[0].value] = ast.literal_eval(node.args[1])
    assert {key: reads.get(key) for key in SWITCHES} == dict.fromkeys(SWITCHES, False)



@pytest.mark.parametrize("switch", SWITCHES)
def test_switch_is_a_learner_argument_defaulting_off(patched_uni_rl_root: Path, switch: str) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        import inspect
        param = inspect.signature(FlashSACLearner.__init__).parameters[{switch!r}]
        print(json.dumps({{"default": param.default, "set": getattr(learner(**{{{switch!r}: True}}), {switch!r})}}))
        """,
    )
    # compile_full_objectives needs use_compile and CUDA Inductor: on CPU it stays off.
    assert result == {"default": False, "set": switch != "compile_full_objectives"}


@pytest.mark.extended  # a real Inductor compile on the CPU (cold: about a minute on two cores)
def test_full_objective_compile_matches_eager_on_cpu(
    pristine_uni_rl_root: Path, patched_uni_rl_root: Path, tmp_path: Path
) -> None:
    """The compiled whole objectives against eager, on CPU, under GPU mode's own gates.

    Inductor's C++ backend compiles the same objectives the CUDA path compiles (the
    worker lifts only the learner's CUDA-only compile gate), so the first update's
    losses, gradients and BatchNorm statistics, and the drift after two iterations,
    are checked by ``compare_configurations`` exactly as on the H200. A negative
    control shows the first-update gate fails on a real difference: rewards of the
    first batch scaled by 1.001 move the critic's loss and gradients far beyond
    rounding, while the actor's first update (which never reads rewards) still passes.
    """
    from concurrent.futures import ThreadPoolExecutor

    import torch

    sys.path[:0] = [str(PROJECT / "experiments" / folder) for folder in ("evidence", "bench")]
    from numerics.compare import compare_first_update
    from numerics.config import FIRST_CRITIC_SNAPSHOT, TIER_A_SNAPSHOT, WorkerConfig
    from numerics.configurations import compare_configurations
    from numerics.modes import make_data, run_worker

    iterations, updates_per_step = 2, 2
    data = tmp_path / "data.pt"
    make_data(data, iterations, updates_per_step, batch_size=64)
    common = WorkerConfig(
        device="cpu",
        seed=7,
        updates_per_step=updates_per_step,
        policy_frequency=2,
        fallback_random=True,
        compile_on_cpu=True,
        warm_up=True,
        snapshot_at=[FIRST_CRITIC_SNAPSHOT, TIER_A_SNAPSHOT],
    )
    guard = {"finite_guard": True, "deferred_metrics": True}
    full = {"use_compile": True, "compile_full_objectives": True, **guard}
    probe = common.replace(first_update_probe=True)
    jobs: dict[str, tuple[Path, Path, WorkerConfig]] = {
        "patched/fp32/eager": (patched_uni_rl_root, data, probe.replace(learner=guard)),
        "patched/fp32/full_objective_compile": (patched_uni_rl_root, data, probe.replace(learner=full)),
        "patched/fp32/eager_one_ulp": (
            patched_uni_rl_root, data, common.replace(learner=guard, one_ulp_rewards=True)
        ),
        "baseline/fp32/eager": (pristine_uni_rl_root, data, common.replace(warm_up=False)),
    }
    # Negative control input: the first batch's rewards scaled by 1.001.
    loaded = torch.load(data, weights_only=True)
    loaded["batches"][0]["rewards"] = loaded["batches"][0]["rewards"] * 1.001
    other = tmp_path / "other.pt"
    torch.save(loaded, other)
    jobs["changed"] = (patched_uni_rl_root, other, probe.replace(learner=guard))

    def run(key: str) -> tuple[str, Any]:
        root, path, config = jobs[key]
        return key, run_worker(root, path, config, tmp_path, key.replace("/", "_"), torch_threads=1)

    # Two cores: the compiling worker on one, the four eager ones on the other (one torch thread each).
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = "patched/fp32/full_objective_compile"
        results = dict(pool.map(run, [first, *(key for key in jobs if key != first)]))
    changed = results.pop("changed")
    compiled = results["patched/fp32/full_objective_compile"]
    # Really compiled (critic and actor objectives at least), all during the warm-up.
    assert compiled["graphs_compiled_total"] >= 2
    assert compiled["graphs_compiled_after_warm_up"] == 0

    checks, measurements = compare_configurations(results, iterations)
    assert "tier_b_amplification_floor" in measurements and "tier_b_amplification_floor" not in checks
    check = checks["fp32:full_objective_compile_vs_eager"]
    assert check["passed"] is True, json.dumps(check, default=str)[:3000]
    assert checks["fp32:patched_eager_vs_baseline_eager"]["passed"] is True
    # Not bitwise: the compiled objective reorders reductions, and the gate absorbs that.
    assert check["first_update"]["worst_by_kind"]["gradient"]["difference"] > 0.0

    # Negative control: the same gate on a genuinely different first batch.
    reference = results["patched/fp32/eager"]["first_update"]
    critic = compare_first_update(reference, changed["first_update"], phases=("critic",))
    actor = compare_first_update(reference, changed["first_update"], phases=("actor",))
    assert critic["passed"] is False
    assert any("/loss/critic_loss" in failure for failure in critic["failures"])
    assert actor["passed"] is True

    # Negative controls of the other gates, on the same real results: a final state
    # drifted far beyond the amplification floor fails the drift gate; the baseline's
    # first critic update with a gradient 1 % off fails the patched-vs-baseline gate.
    drifted = copy.deepcopy(results)
    weight = drifted["patched/fp32/full_objective_compile"]["state"]["critic"]
    name = next(k for k in weight if k.endswith("weight"))
    weight[name] = weight[name] * 1.5
    drifted_checks, _ = compare_configurations(drifted, iterations)
    assert drifted_checks["fp32:full_objective_compile_vs_eager"]["passed"] is False
    assert drifted_checks["fp32:full_objective_compile_vs_eager"]["first_update"]["passed"] is True
    moved = copy.deepcopy(results)
    moments = moved["baseline/fp32/eager"]["snapshots"][FIRST_CRITIC_SNAPSHOT]["critic_optimizer"]["state"]
    moments[0]["exp_avg"] = moments[0]["exp_avg"] * 1.01
    moved_checks, _ = compare_configurations(moved, iterations)
    assert moved_checks["fp32:patched_eager_vs_baseline_eager"]["passed"] is False


def test_aligned_products_keep_each_update_within_float_rounding(patched_uni_rl_root: Path) -> None:
    """``aligned_products`` (uni_rl 0017): the networks' products on zero-padded aligned widths (the prelude's
    learner has unaligned ones: 12 observations, 4 actions, a critic input of 20, 101 atoms). From the same state,
    the same batch and the same seed, a critic and an actor update with every layer padded (the layers' own switch,
    which pads on any device) give every parameter and optimizer state within 1e-6 of the learner without it (the
    sums' order may differ), with the same shapes. The learner's switch pads only on CUDA (uni_rl 0017): on this
    CPU it keeps the requested value, pads no layer, and its update is bitwise the learner without it, as is the
    switch off. Control: padding with ones instead of zeros moves them far beyond that."""
    result = run_snippet(
        patched_uni_rl_root,
        """
        import types
        import torch.nn.functional as F
        from uni_rl.algos.flash_sac import layers

        def updated(pad_value=0.0, padded=False, **switches):
            shim = types.ModuleType("F")
            shim.__dict__.update(F.__dict__)
            shim.pad = lambda x, pad: F.pad(x, pad, value=pad_value)
            layers.F = shim
            l = learner(**switches)
            if padded:
                for net in (l.actor, l.critic, l.target_critic):
                    layers.use_aligned_products(net, True)
            b = batch(1)
            torch.manual_seed(7)
            l.update_critic(b); l.update_actor(b); l.soft_update_target()
            layers.F = F
            return state(l)

        def worst(a, b):
            assert a.keys() == b.keys() and all(a[k].shape == b[k].shape for k in a)
            return max((a[k].double() - b[k].double()).abs().max().item() for k in a if a[k].is_floating_point())

        def aligned_layers(l):
            return sum(getattr(m, "aligned", False) for net in (l.actor, l.critic) for m in net.modules())

        plain = updated()
        on_cpu = learner(aligned_products=True)
        forced = learner()
        for net in (forced.actor, forced.critic):
            layers.use_aligned_products(net, True)
        print(json.dumps({
            "off_bitwise": same(plain, updated(aligned_products=False), ("",)),
            "switch_on_cpu": {"requested": on_cpu.aligned_products, "aligned_layers": aligned_layers(on_cpu),
                              "bitwise": same(plain, updated(aligned_products=True), ("",))},
            "padded_layers": aligned_layers(forced),
            "aligned": worst(plain, updated(padded=True)),
            "ones_control": worst(plain, updated(pad_value=1.0, padded=True)),
        }))
        """,
    )
    assert result["off_bitwise"], result
    assert result["switch_on_cpu"] == {"requested": True, "aligned_layers": 0, "bitwise": True}, result
    assert result["padded_layers"] == 14, result
    assert result["aligned"] <= 1e-6, result
    assert result["ones_control"] > 1e-3, result


@pytest.mark.parametrize("switch", ["combo_kernels"])
def test_inductor_switches_reach_every_function_the_learner_compiles(patched_uni_rl_root: Path, switch: str) -> None:
    """``combo_kernels`` (uni_rl 0018) adds the Inductor option of its name to every function the learner
    compiles and changes nothing else of the compile: the learner's CUDA-only compile gate is lifted with a
    compile that records its arguments and compiles nothing. Control: the switch off passes the same calls
    without the option."""
    result = run_snippet(
        patched_uni_rl_root,
        """
        import uni_rl.algos.flash_sac.learner as learner_module

        SWITCH = %r

        def compiles(**switches):
            calls = []
            def record(fn, **kwargs):
                calls.append((getattr(fn, "__name__", repr(fn)), kwargs))
                return fn
            learner_module.get_torch_compile_for_cuda = lambda device, warn=False: record
            learner(use_compile=True, compile_full_objectives=True, finite_guard=True, **switches)
            return calls

        on, off = compiles(**{SWITCH: True}), compiles()
        print(json.dumps({
            "functions": [name for name, _ in on],
            "same_functions": [name for name, _ in on] == [name for name, _ in off],
            "on_all": all(kw.get("options", {}).get(SWITCH) is True for _, kw in on),
            "off_none": all(SWITCH not in kw.get("options", {}) for _, kw in off),
            "rest_unchanged": all(
                {**kw_on, "options": {k: v for k, v in kw_on["options"].items() if k != SWITCH}} == kw_off
                for (_, kw_on), (_, kw_off) in zip(on, off)),
        }))
        """ % switch,
    )
    assert len(result["functions"]) >= 8 and result["same_functions"], result
    assert {"_critic_objective_eager", "_actor_objective_eager", "_guarded_polyak_eager"} <= set(result["functions"])
    assert result["on_all"] and result["off_none"] and result["rest_unchanged"], result
