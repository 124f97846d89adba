"""CPU tests of the whole-cycle CUDA graph switch (patches/uni_rl/0005).

The graph itself needs a GPU (experiments/evidence/validate_numerics.py and
validate_replay_stability.py check it there). What the CPU can check: the switch and its
config key, the fallback (one warning, then bitwise the per-update path), and the pieces
the captured iteration is built from: the update schedule shared with the runner, the
batch slices, the staged learning rates and the key that decides a re-capture.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import PROJECT
from snippets import run_snippet

SWITCH = "use_whole_cycle_cuda_graph"

# The train loop of the unilab-rl 1.3.2 runner (DoubleBufferOffPolicyRunner.learn), as
# (kind, update_idx, batch rows, metrics-read flag) per call, transcribed from its source:
# critic every update (read on the last), actor when update_idx % policy_frequency == 0
# (read when update_idx + policy_frequency >= updates_per_step), then the target update.
BASELINE_LOOP = """
def baseline_loop(updates_per_step, policy_frequency, batch_size):
    calls = []
    for update_idx in range(updates_per_step):
        s = update_idx * batch_size
        e = s + batch_size
        calls.append(("critic", update_idx, (s, e), update_idx == updates_per_step - 1))
        if update_idx % policy_frequency == 0:
            next_actor_update = update_idx + policy_frequency
            calls.append(("actor", update_idx, (s, e), next_actor_update >= updates_per_step))
        calls.append(("target", update_idx, (s, e), False))
    return calls


def run_baseline_iteration(learner, large, updates_per_step, policy_frequency, batch_size):
    # One iteration on the per-update path, in the 1.3.2 loop's order; returns the update metrics.
    metrics = []
    for kind, _, (s, e), _ in baseline_loop(updates_per_step, policy_frequency, batch_size):
        b = {k: v[s:e] for k, v in large.items()}
        if kind == "critic":
            metrics.append(learner.update_critic(b))
        elif kind == "actor":
            metrics.append(learner.update_actor(b))
        else:
            learner.soft_update_target()
    return metrics
"""


def test_config_key_defaults_on_and_the_bench_overrides_select_both_ways(
    patched_unilab_root: Path,
) -> None:
    """The tree's defaults are both graphs; the bench's configurations turn off what they do not measure."""
    from hydra import compose, initialize_config_dir

    sys.path.insert(0, str(PROJECT / "experiments" / "bench"))
    import bench_configs

    conf = patched_unilab_root / "src" / "unilab" / "conf" / "flashsac"
    inference = bench_configs.INFERENCE_GRAPH_KEY.rsplit(".", 1)[1]
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        assert compose("config").algo.algo_params[SWITCH] is True
        chosen = {}
        for name, config in bench_configs.CONFIGS.items():
            if config.source == "overlay":
                composed = compose("config", overrides=list(config.overrides))
                params = composed.algo.algo_params
                chosen[name] = (params[SWITCH], params[inference])
                # The bench compiles every configuration but compile-behind before tick 0 (the tree: auto).
                assert composed.training.compile_behind is (name == "compile-behind")
                assert composed.training.logger == ("no_print" if name == "logging-off" else "tensorboard")
                assert params.aligned_products is (name != "no-aligned-products")  # the default (unilab 0001)
                assert params.combo_kernels is (name != "no-combo-kernels")  # the tree's default (unilab 0001)
                rates = {key: params[key] for key, _ in bench_configs.TREE_LEARNING_RATES}
                tree = dict(bench_configs.TREE_LEARNING_RATES)
                scale = 0.1 if name == bench_configs.NEGATIVE_CONTROL else 1.0
                assert rates == pytest.approx({key: value * scale for key, value in tree.items()}), name
    assert chosen == {
        "eager": (False, False),
        "compile": (False, False),
        "compile-graphs": (False, False),
        "loss-only-compile": (False, False),
        "whole-cycle-graph": (True, False),
        "whole-cycle-graph-inference": (True, True),
        "patched-default": (True, True),
        "compile-behind": (True, True),  # the default learner; compiled behind, from a later iteration
        "logging-off": (True, True),  # the default learner; no TensorBoard scalars
        "aligned-products": (True, True),  # the default learner; its products on aligned widths set explicitly
        "no-aligned-products": (True, True),  # the default learner; its products on their own widths
        "combo-kernels": (True, True),  # the default learner; Inductor's combo kernels set explicitly
        "no-combo-kernels": (True, True),  # the default learner; compiled without Inductor's combo kernels
        "warp-lazy-build": (True, True),  # the default learner; MuJoCo Warp's kernels built at their launch
        "warp-build-ahead": (True, True),  # the default learner; MuJoCo Warp's core kernels built ahead
        bench_configs.NEGATIVE_CONTROL: (True, True),  # the default learner with learning rates ÷10
    }


def test_builder_and_learner_read_the_switch(patched_uni_rl_root: Path) -> None:
    """The builder reads the switch with default off (a source check: building is GPU-only,
    see test_learner_patches.py::test_builder_reads_switches_with_1_3_2_defaults); the
    learner takes it as an argument, default off (run)."""
    source = (patched_uni_rl_root / "uni_rl/algos/flash_sac/double_buffer.py").read_text()
    reads = {
        node.args[0].value: ast.literal_eval(node.args[1])
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and len(node.args) == 2
        and isinstance(node.args[0], ast.Constant)
    }
    assert reads.get(SWITCH) is False
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        import inspect
        param = inspect.signature(FlashSACLearner.__init__).parameters[{SWITCH!r}]
        print(json.dumps({{"default": param.default, "set": learner({SWITCH}=True).{SWITCH}}}))
        """,
    )
    assert result == {"default": False, "set": True}


@pytest.mark.parametrize("deferred", [False, True])
def test_cpu_falls_back_once_and_equals_the_per_update_path_bitwise(
    patched_uni_rl_root: Path, deferred: bool
) -> None:
    """On CPU the switch warns once, turns itself off, and trains exactly as before."""
    result = run_snippet(
        patched_uni_rl_root,
        BASELINE_LOOP
        + textwrap.dedent(
            f"""
        import warnings
        from flashsac_runtime.learner.update_schedule import iteration_update_schedule

        ups, pf, size = 4, 2, 16
        switches = dict(finite_guard=True, deferred_metrics={deferred},
                        learning_rate_init=1e-4, learning_rate_warmup_steps=5)
        graph = learner(use_whole_cycle_cuda_graph=True, **switches)
        reference = learner(**switches)
        schedule = iteration_update_schedule(ups, pf)
        progress = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graph_metrics, ref_metrics = [], []
            for it in range(3):
                large = batch(100 + it, size * ups)
                torch.manual_seed(it)
                out = graph.update_iteration(large, batch_size=size, schedule=schedule,
                                             after_target_update=lambda: progress.append(it))
                graph_metrics.append(graph.read_deferred_metrics() if {deferred} else out)
                torch.manual_seed(it)
                ref = run_baseline_iteration(reference, large, ups, pf, size)
                ref_metrics.append(reference.read_deferred_metrics() if {deferred}
                                   else [m for m in ref if m])
        fallback = [w for w in caught if issubclass(w.category, RuntimeWarning)]
        a, b = state(graph), state(reference)
        print(json.dumps({{
            "warnings": len(fallback),
            "mentions": all("whole-iteration" in str(w.message) for w in fallback),
            "switch_after": graph.use_whole_cycle_cuda_graph,
            "same_state": sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
            "same_metrics": graph_metrics == ref_metrics,
            "metrics_nonempty": all(bool(m) for m in graph_metrics),
            "lrs": [g.critic_optimizer.param_groups[0]["lr"] for g in (graph, reference)],
            "progress_calls": len(progress),
        }}))
        """
        ),
    )
    assert result["warnings"] == 1 and result["mentions"]
    assert result["switch_after"] is False
    assert result["same_state"] and result["same_metrics"] and result["metrics_nonempty"]
    assert result["lrs"][0] == result["lrs"][1]
    assert result["progress_calls"] == 3 * 4


@pytest.mark.parametrize(("updates_per_step", "deferred"), [(2, True), (8, False)])
def test_graph_body_run_eagerly_equals_the_per_update_path_bitwise(
    patched_uni_rl_root: Path, updates_per_step: int, deferred: bool
) -> None:
    """What the graph captures, run eagerly on CPU: bitwise the per-update path.

    The body (staged learning rates copied into tensor rates, static batch slices,
    shared steps, re-normalization, target updates, metric rows) and the host side
    after a replay (scheduler steps, metric copy-out) run exactly as on the GPU; only
    the capture and the pinned H2D staging copy need CUDA.
    """
    result = run_snippet(
        patched_uni_rl_root,
        BASELINE_LOOP
        + textwrap.dedent(
            f"""
        from flashsac_runtime.learner.update_schedule import iteration_update_schedule
        from uni_rl.algos.flash_sac.learner import whole_cycle_graph_key

        ups, pf, size = {updates_per_step}, 2, 8
        switches = dict(finite_guard=True, deferred_metrics={deferred},
                        learning_rate_init=1e-5, learning_rate_warmup_steps=5,
                        learning_rate_decay_steps=30)
        body = learner(**switches)
        reference = learner(**switches)
        # Both with tensor rates (float32, as on CUDA with any graph switch): a float
        # rate is a double, and the staged float32 rate differs from it in rounding.
        for l in (body, reference):
            l._use_device_learning_rates()
        schedule = iteration_update_schedule(ups, pf)
        body_metrics, ref_metrics = [], []
        for it in range(2):
            large = batch(200 + it, size * ups)
            g = torch.Generator().manual_seed(it)
            rewards, dones = torch.randn(3, 5, generator=g), torch.zeros(3, 5)
            for l in (body, reference):
                l.update_reward_stats(rewards, dones)
            plan = body._new_whole_cycle_plan(
                whole_cycle_graph_key(large, size, schedule), large, size, schedule)
            plan.lr_stage.copy_(torch.tensor(body._whole_cycle_lr_values(plan.lr_sources)))
            torch.manual_seed(it)
            body._whole_cycle_body(plan)
            out = body._finish_whole_cycle(plan)
            body_metrics.append(body.read_deferred_metrics() if {deferred} else out)
            torch.manual_seed(it)
            ref = run_baseline_iteration(reference, large, ups, pf, size)
            ref_metrics.append(reference.read_deferred_metrics() if {deferred}
                               else [m for m in ref if m])
        a, b = state(body), state(reference)
        lrs = [[float(o.param_groups[0]["lr"]) for o in (l.critic_optimizer, l.actor_optimizer,
                l.temperature_optimizer)] for l in (body, reference)]
        print(json.dumps({{
            "same_state": sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a),
            "same_metrics": body_metrics == ref_metrics,
            "metrics_nonempty": all(bool(m) for m in body_metrics),
            "rates_are_tensors": isinstance(body.critic_optimizer.param_groups[0]["lr"], torch.Tensor),
            "lrs": lrs,
        }}))
        """
        ),
    )
    assert result["rates_are_tensors"]
    assert result["same_state"] and result["same_metrics"] and result["metrics_nonempty"]
    assert result["lrs"][0] == result["lrs"][1]


@pytest.mark.parametrize("updates_per_step", [2, 8])
def test_schedule_equals_the_runner_loop(patched_uni_rl_root: Path, updates_per_step: int) -> None:
    """The shared schedule is the 1.3.2 loop's calls, batch rows and read flags."""
    result = run_snippet(
        patched_uni_rl_root,
        BASELINE_LOOP
        + textwrap.dedent(
            f"""
        from flashsac_runtime.learner.update_schedule import batch_slice, iteration_update_schedule
        ups, pf, size = {updates_per_step}, 2, 32
        ours = []
        for u in iteration_update_schedule(ups, pf):
            rows = batch_slice(u.update_idx, size)
            ours.append([u.kind, u.update_idx, [rows.start, rows.stop], u.read_metrics])
        expected = [[k, i, list(r), f] for k, i, r, f in baseline_loop(ups, pf, size)]
        print(json.dumps({{"ours": ours, "expected": expected}}))
        """
        ),
    )
    assert result["ours"] == result["expected"]
    kinds = [call[0] for call in result["ours"]]
    assert kinds.count("critic") == updates_per_step
    assert kinds.count("actor") == updates_per_step // 2
    assert kinds.count("target") == updates_per_step


def test_runner_loop_executes_the_shared_schedule(patched_uni_rl_root: Path) -> None:
    """The runner's per-update loop and the iteration call both take ``update_schedule``.

    A source check (AST) because ``DoubleBufferOffPolicyRunner.learn`` is GPU-only: the
    runner refuses a CPU learner device, and its loop needs the collector process and the
    device replay. The schedule it executes is checked by running it (the tests above
    and below: the 1.3.2 call order, the staged rates).
    """
    source = (patched_uni_rl_root / "uni_rl/offpolicy/double_buffer_runner.py").read_text()
    tree = ast.parse(source)
    loops_over_updates = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.For)
        and isinstance(node.iter, ast.Call)
        and ast.unparse(node.iter) == "range(self.updates_per_step)"
    ]
    assert loops_over_updates == []
    schedule_loops = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.For) and ast.unparse(node.iter) == "update_schedule"
    ]
    assert len(schedule_loops) == 1
    assert "run_scheduled_update(learner, update, batch)" in ast.unparse(schedule_loops[0])
    assert "schedule=update_schedule" in source


@pytest.mark.parametrize("updates_per_step", [2, 8])
def test_staged_learning_rates_equal_the_per_update_rates(
    patched_uni_rl_root: Path, updates_per_step: int
) -> None:
    """Each update's staged rate is the rate its optimizer steps with on the per-update path."""
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        from flashsac_runtime.learner.update_schedule import iteration_update_schedule, run_scheduled_update, slice_batch
        ups, pf, size = {updates_per_step}, 2, 8
        l = learner(learning_rate_init=1e-5, learning_rate_warmup_steps=7, learning_rate_decay_steps=20)
        schedule = iteration_update_schedule(ups, pf)
        names = {{id(l.critic_optimizer): "critic", id(l.actor_optimizer): "actor",
                 id(l.temperature_optimizer): "temperature"}}
        seen = []
        def hook(optimizer, args, kwargs):
            seen.append([names[id(optimizer)], float(optimizer.param_groups[0]["lr"])])
        for opt in (l.critic_optimizer, l.actor_optimizer, l.temperature_optimizer):
            opt.register_step_pre_hook(hook)
        staged = []
        for it in range(2):
            slots, sources = l._whole_cycle_lr_layout(schedule)
            values = l._whole_cycle_lr_values(sources)
            order = {{id(l.critic_scheduler): "critic", id(l.actor_scheduler): "actor",
                     id(l.temperature_scheduler): "temperature"}}
            for update_slots in slots:
                for _, slot in update_slots:
                    staged.append([order[id(sources[slot][0])], float(torch.tensor(values[slot], dtype=torch.float32))])
            large = batch(it, size * ups)
            for u in schedule:
                run_scheduled_update(l, u, slice_batch(large, u.update_idx, size))
        seen = [[n, float(torch.tensor(v, dtype=torch.float32))] for n, v in seen]
        print(json.dumps({{"staged": staged, "seen": seen}}))
        """,
    )
    assert len(result["staged"]) == 2 * (updates_per_step + 2 * (updates_per_step // 2))
    assert result["staged"] == result["seen"]
    assert len({value for _, value in result["seen"]}) > 1  # the schedule really moves


def test_graph_key_changes_with_shape_dtype_and_schedule(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        from uni_rl.algos.flash_sac.learner import whole_cycle_graph_key
        from flashsac_runtime.learner.update_schedule import iteration_update_schedule
        s22, s82, s84 = (iteration_update_schedule(u, p) for u, p in ((2, 2), (8, 2), (8, 4)))
        base = batch(0, 64)
        key = whole_cycle_graph_key(base, 32, s22)
        wider = dict(base, critic=torch.randn(64, 17))
        half = dict(base, obs=base["obs"].to(torch.bfloat16))
        longer = batch(1, 128)
        extra = dict(base, unrelated=torch.zeros(3))
        print(json.dumps({
            "same": key == whole_cycle_graph_key(batch(9, 64), 32, s22),
            "unrelated_field": key == whole_cycle_graph_key(extra, 32, s22),
            "shape": key != whole_cycle_graph_key(wider, 32, s22),
            "dtype": key != whole_cycle_graph_key(half, 32, s22),
            "rows": key != whole_cycle_graph_key(longer, 32, s22),
            "batch_size": key != whole_cycle_graph_key(base, 16, s22),
            "updates": key != whole_cycle_graph_key(base, 32, s82),
            "policy_frequency": whole_cycle_graph_key(base, 8, s82) != whole_cycle_graph_key(base, 8, s84),
        }))
        """,
    )
    assert result == dict.fromkeys(result, True) and len(result) == 8


def test_deferred_rows_append_as_per_update_records(patched_uni_rl_root: Path) -> None:
    """record_rows (the graph's metrics copy-out) reads back like per-update records."""
    result = run_snippet(
        patched_uni_rl_root,
        """
        from flashsac_runtime.learner.deferred_metrics import DeferredMetricsBuffer
        groups = {"critic": ("a", "b"), "actor": ("c",)}
        rows = torch.tensor([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0]])
        one, many = (DeferredMetricsBuffer(groups, torch.device("cpu"), capacity=2) for _ in range(2))
        for row in rows:
            one.record("critic", list(row))
        one.record("actor", [torch.tensor(4.0)])
        many.record_rows("critic", rows[:1])
        many.record_rows("critic", rows[1:])
        many.record_rows("actor", torch.tensor([[4.0]]))
        try:
            many.record_rows("actor", torch.zeros(1, 2))
            wrong_width = "accepted"
        except ValueError:
            wrong_width = "refused"
        print(json.dumps({"one": one.read(), "many": many.read(), "wrong_width": wrong_width}))
        """,
    )
    assert result["one"] == result["many"] == {"a": 11 / 3, "b": 6.0, "c": 4.0}
    assert result["wrong_width"] == "refused"


def test_inference_policy_hands_the_actor_its_forward_and_stays_eager_without_cuda(
    patched_uni_rl_root: Path,
) -> None:
    """0015: explore with a precomputed forward equals explore; on CPU the switch warns once and turns off."""
    result = run_snippet(
        patched_uni_rl_root,
        """
        import warnings
        l = learner(finite_guard=True, deferred_metrics=True)
        l.update_critic(batch(1)); l.update_actor(batch(1))
        obs, dones = batch(2)["obs"], torch.zeros(32)
        actor = l.actor

        def answers(hand_over):
            state = {n: getattr(actor, n).clone() for n in ("_noise", "_repeat_count", "_repeat_target")}
            rng = torch.random.get_rng_state()
            out = []
            for _ in range(3):
                forward = actor.get_mean_and_std(obs, training=False) if hand_over else None
                out.append(actor.explore(obs, dones=dones, mean_and_std=forward))
            torch.random.set_rng_state(rng)
            for n, v in state.items():
                setattr(actor, n, v)
            return out

        same = all(torch.equal(a, b) for a, b in zip(answers(False), answers(True)))
        with_switch = learner(use_cuda_graph_inference=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first, second = with_switch.inference_policy, with_switch.inference_policy
        print(json.dumps({
            "same_actions": same,
            "cpu_policy_is_actor": first is with_switch.actor and second is with_switch.actor,
            "switch_after": with_switch.use_cuda_graph_inference,
            "warnings": sum("inference" in str(w.message) for w in caught),
            "default_policy_is_actor": l.inference_policy is l.actor,
        }))
        """,
    )
    assert result == {
        "same_actions": True,
        "cpu_policy_is_actor": True,
        "switch_after": False,
        "warnings": 1,
        "default_policy_is_actor": True,
    }


SERVE_ONE_REQUEST = """
import numpy as np
from uni_rl.ipc.inference_slot import SharedInferenceSlot
from uni_rl.offpolicy.double_buffer_runner import DoubleBufferOffPolicyRunner as Runner

asked = []

class Policy:
    # Answers as the actor does, and records that it was asked.
    def __init__(self, actor):
        self.actor = actor

    def explore(self, obs, dones=None, deterministic=False):
        asked.append(int(obs.shape[0]))
        return self.actor.explore(obs, dones=dones, deterministic=deterministic)

class Learner(FlashSACLearner):
    @property
    def inference_policy(self):
        return Policy(self.actor)

torch.manual_seed(0)
l = Learner(obs_dim=12, action_dim=4, critic_obs_dim=16, actor_hidden_dim=32, critic_hidden_dim=64)
runner = Runner.__new__(Runner)  # __init__ refuses a CPU device; these are the attributes the method reads
runner.device, runner.obs_dim, runner.algo_type, runner.obs_normalization, runner.learner = "cpu", 12, "flashsac", False, l
slot = SharedInferenceSlot(num_envs=4, obs_dim=12, action_dim=4)
slot.publish_observation(tick_id=1, observations=np.ones((4, 12), dtype=np.float32), dones=np.zeros(4, dtype=np.float32))
Runner._serve_learner_inference(runner, slot, tick_id=1, policy_version=3, obs_device=torch.zeros(4, 12),
                                dones_device=torch.zeros(4), trace_recorder=None)
actions, version = slot.consume_action(tick_id=1)
print(json.dumps({"asked": asked, "version": version, "finite": bool(np.isfinite(actions).all())}))
"""


def test_runner_serves_inference_through_the_learners_policy(
    patched_uni_rl_root: Path, pristine_uni_rl_root: Path
) -> None:
    """0012: the runner answers a collector request through ``learner.inference_policy``.

    The real ``_serve_learner_inference`` serves one request from a real shared slot on
    CPU. The runner is made without ``__init__``, which refuses a CPU learner device,
    with the attributes the method reads. The learner's policy records that it was
    asked; 1.3.2's runner, which asks ``learner.actor``, leaves it unasked (the control).
    """
    patched = run_snippet(patched_uni_rl_root, SERVE_ONE_REQUEST)
    assert patched == {"asked": [4], "version": 3, "finite": True}
    pristine = run_snippet(pristine_uni_rl_root, SERVE_ONE_REQUEST)
    assert pristine == {"asked": [], "version": 3, "finite": True}


def test_inference_switch_builder_default_off_tree_default_on(
    patched_uni_rl_root: Path, patched_unilab_root: Path
) -> None:
    """A config without use_cuda_graph_inference keeps 1.3.2's eager forward; the patched tree turns it on.

    The builder's default is a source check (building is GPU-only, see
    test_learner_patches.py::test_builder_reads_switches_with_1_3_2_defaults); the tree's
    default is read through Hydra as the trainer reads it.
    """
    from hydra import compose, initialize_config_dir

    source = (patched_uni_rl_root / "uni_rl/algos/flash_sac/double_buffer.py").read_text()
    assert 'cfg.algo.algo_params.get("use_cuda_graph_inference", False)' in source
    conf = patched_unilab_root / "src" / "unilab" / "conf" / "flashsac"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        assert compose("config").algo.algo_params.use_cuda_graph_inference is True


def test_inference_probe_of_validate_numerics_replays_the_same_requests(patched_uni_rl_root: Path) -> None:
    """The GPU gate's harness on CPU: both sides are the eager actor, so they must agree bitwise.

    Three consecutive requests move the exploration state and the random stream; only a
    harness that restores both between the two sides gets equal answers.
    """
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        sys.path[:0] = {[str(PROJECT / "experiments" / folder) for folder in ("evidence", "bench")]!r}
        from numerics.probes import inference_probe
        l = learner(finite_guard=True, deferred_metrics=True)
        l.update_critic(batch(1)); l.update_actor(batch(1))
        print(json.dumps(inference_probe(l, batch(2)["obs"])))
        """,
    )
    assert result == {
        "captured": False,
        "bitwise_equal": True,
        "worst_relative_difference": 0.0,
        "cuda_calls_per_request": {},
    }


def test_replay_tracking_gate_catches_a_stale_learning_rate(patched_uni_rl_root: Path) -> None:
    """validate_replay_stability's ``update`` error: 0 for the same step, above its median gate for a 0.5 % rate error.

    A graph that kept a stale learning rate would differ from eager exactly so (the
    schedule changes the rate by ~0.5 % per step in its warm-up).
    """
    result = run_snippet(
        patched_uni_rl_root,
        f"""
        import copy
        sys.path[:0] = {[str(PROJECT / "experiments" / folder) for folder in ("evidence", "bench")]!r}
        import learner_study
        import validate_replay_stability as rs
        from uni_rl.algos.flash_sac import learner as L

        def build():
            return learner_study.build_learner(L, "cpu", 11, rs.LEARNER_KWARGS)

        batches = rs.make_batches(torch, "cpu")
        reference, candidate = build(), build()
        errors = {{}}
        for label, scale in (("same", 1.0), ("stale", 1.005)):
            for _ in range(3):  # past Adam's first steps
                rs.run_updates(reference, batches[:2], None); reference.read_deferred_metrics()
            candidate.load_state_dict(copy.deepcopy(reference.get_state_dict()))
            before = rs.parameters_of(reference)
            for group in candidate.critic_optimizer.param_groups:
                group["lr"] = group["lr"] * scale
            rng = torch.random.get_rng_state()
            rs.run_updates(reference, batches[2:4], None); reference.read_deferred_metrics()
            torch.random.set_rng_state(rng)
            rs.run_updates(candidate, batches[2:4], None); candidate.read_deferred_metrics()
            errors[label] = rs.tracking_errors(torch, before, reference, candidate)["update"][0]
        print(json.dumps({{"same": errors["same"], "stale_caught": errors["stale"] > rs.TRACKING_MEDIAN_TOL["update"]}}))
        """,
    )
    assert result == {"same": 0.0, "stale_caught": True}
