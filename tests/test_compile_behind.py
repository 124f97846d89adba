"""Training starts on the eager path and compiles behind (uni_rl 0014, unilab 0007), on the CPU.

- The learner's swap: a learner trained three iterations on its deferred (eager) path, swapped to its
  compiled paths through the runner's warm-up and trained on, ends bitwise where the uncompiled learner
  ends: parameters, optimizer moments, schedules, normalizers, metrics. Nothing compiles before the swap
  and the compiled frames run after it. The learner's CUDA-only compile gate is lifted with Dynamo's
  ``eager`` backend (the frames, guards and swaps of Inductor, run by ATen: bitwise, so the tolerance
  stated for these checks is zero). Control: a swap that leaves one dry update in the state is caught.
- The helper's dry batches have the runner's layout (shapes, strides, offsets, dtypes; views into one
  packed buffer), where a contiguous copy would compile other graphs (control: ``zeros_like`` differs).
- UniLab's command line with ``training.compile_behind=true`` on the device collector: the run starts
  without a warm-up, a real helper process warms the learner's twin up, the swap happens at an iteration
  boundary, the summary records it, and the final checkpoint is bitwise the one of the same run without
  compile behind (on the CPU the configured whole-cycle graph falls back to the per-update path in both
  runs); the tree's default (``auto``) starts no helper on the CPU.
- ``training.compile_behind``: ``auto`` is on with one rank on a CUDA device only, ``true`` with data-parallel
  ranks and a value that is none of auto/true/false are one-line errors.
- The host collector's wait for each action does not count a pause the learner announced (its warm-up, the
  swap), however long; without the announcement the same wait times out (the control).

The host collector's runner needs a CUDA device for its replay pipeline, so its compile-behind start and swap
run on the GPU only (``experiments/device/device_evidence.sh``); the swap itself is the learner's, checked above.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from conftest import PROJECT, runnable_tree, side_by_side
from snippets import run_snippet

SWAP = """
import torch._dynamo
from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics
import uni_rl.algos.flash_sac.learner as learner_module
from flashsac_runtime.learner.update_schedule import iteration_update_schedule

learner_module.get_torch_compile_for_cuda = lambda device, warn=False: (
    lambda fn, options=None, **kwargs: torch.compile(fn, backend="eager", **kwargs))
SCHEDULE = iteration_update_schedule(2, 2)
SWITCHES = dict(finite_guard=True, deferred_metrics=True)

def large(seed):
    parts = [batch(seed * 10 + i) for i in range(2)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

def full_state(l):
    out = state(l)
    for name in ("actor_optimizer", "critic_optimizer", "temperature_optimizer"):
        for i, s in enumerate(getattr(l, name).state.values()):
            for k, v in s.items():
                out[f"{name}.{i}.{k}"] = v.detach().clone() if torch.is_tensor(v) else torch.tensor(v)
    rn = l.reward_normalizer
    out.update({"rms.mean": rn.rms.mean.clone(), "rms.var": rn.rms.var.clone(), "g_r": rn.g_r.clone()})
    return out

def train(l, swap_at=None, control=False):
    metrics, frames = [], {}
    for it in range(6):
        if it == swap_at:
            frames["before_swap"] = len(get_compilation_metrics())
            l.restore_compiled_paths()
            dry = {k: torch.zeros_like(v) for k, v in large(0).items()}
            l.warm_up({k: v[:32] for k, v in dry.items()}, inference_obs=dry["obs"], iteration_batch=dry,
                      schedule=SCHEDULE)
            if control:
                l.update_iteration(dry, batch_size=32, schedule=SCHEDULE)
        l.update_reward_stats(torch.randn(1, 8, generator=torch.Generator().manual_seed(it)), torch.zeros(1, 8))
        metrics.append(l.update_iteration(large(it + 1), batch_size=32, schedule=SCHEDULE))
        metrics[-1].append(l.read_deferred_metrics())
    frames["after"] = len(get_compilation_metrics())
    return full_state(l), metrics, frames, [s.last_epoch for s in (l.actor_scheduler, l.critic_scheduler)]

def behind(control=False):
    torch._dynamo.reset(); clear_compilation_metrics()
    l = learner(use_compile=True, compile_full_objectives=True, **SWITCHES)
    deferred = l.defer_compiled_paths()
    return deferred, l.compiled_paths_deferred, train(l, swap_at=3, control=control), l.compiled_paths_deferred

def diff(a, b):
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)

torch._dynamo.reset(); clear_compilation_metrics()
reference = train(learner(**SWITCHES))
deferred, during, run, after = behind()
_, _, control, _ = behind(control=True)
print(json.dumps({
    "nothing_to_defer": learner(**SWITCHES).defer_compiled_paths(),
    "deferred": deferred, "flag_during": during, "flag_after": after,
    "frames": run[2], "keys_equal": sorted(run[0]) == sorted(reference[0]),
    "max_difference": diff(run[0], reference[0]), "metrics_equal": run[1] == reference[1],
    "schedulers": [run[3], reference[3]], "control_difference": diff(control[0], reference[0]),
}))
"""

DEFERRED_GRAPH = """
import warnings
import torch._dynamo
from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics
import uni_rl.algos.flash_sac.learner as learner_module
from flashsac_runtime.learner.update_schedule import iteration_update_schedule

learner_module.get_torch_compile_for_cuda = lambda device, warn=False: (
    lambda fn, options=None, **kwargs: torch.compile(fn, backend="eager", **kwargs))
# What a CUDA learner answers: the whole-iteration graph can serve (on the CPU its capture then fails).
learner_module.FlashSACLearner._manual_graph_unsupported_reason = lambda self: None
SCHEDULE = iteration_update_schedule(2, 2)
SWITCHES = dict(finite_guard=True, deferred_metrics=True)
GRAPHED = dict(use_compile=True, compile_full_objectives=True, use_whole_cycle_cuda_graph=True, **SWITCHES)

def compiled(l):
    return {f"{type(o).__name__}.{n}": id(v) for o in (l, l.actor) for n, v in vars(o).items()
            if callable(getattr(v, "_torchdynamo_orig_callable", None))}

def large(seed):
    parts = [batch(seed * 10 + i) for i in range(2)]
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}

def train(l):
    for it in range(3):
        l.update_iteration(large(it + 1), batch_size=32, schedule=SCHEDULE)
    return state(l)

warnings.simplefilter("ignore")
torch._dynamo.reset(); clear_compilation_metrics()
reference = train(learner(**SWITCHES))
l = learner(**GRAPHED)
held = compiled(l)
deferred = l.defer_compiled_paths()
during = [l.use_whole_cycle_cuda_graph, len(compiled(l)), l.deferred_path]
trained = train(l)  # the first iteration's capture fails on the CPU: the deferred fallback
after_fallback = [l.use_whole_cycle_cuda_graph, len(compiled(l)), l.deferred_path, len(get_compilation_metrics())]
l.restore_compiled_paths()
restored = [l.use_whole_cycle_cuda_graph, compiled(l) == held, l.deferred_path]
control = learner(**GRAPHED)
before = compiled(control)
control._fall_back_from_whole_cycle("capture failed (test)")
print(json.dumps({
    "held": len(held), "deferred": deferred, "during": during, "after_fallback": after_fallback,
    "bitwise": all(torch.equal(trained[k], reference[k]) for k in reference), "restored": restored,
    "control_recompiled": compiled(control) != before,
}))
"""


def test_the_deferred_eager_objectives_keep_the_iteration_graph_and_its_failure_compiles_nothing(
        patched_uni_rl_root: Path) -> None:
    """Where the whole-iteration graph can serve, the deferred learner keeps it on over its eager objectives
    (on CUDA the eager kernels replay as one graph); a capture that fails there (as it must on the CPU) falls
    back to the per-update eager path until the swap, compiling nothing, and trains bitwise as the uncompiled
    learner; the swap turns the graph back on with the compiled methods. Control: the same failure outside a
    deferral recompiles the objectives, as the ordinary fallback does."""
    result = run_snippet(patched_uni_rl_root, DEFERRED_GRAPH)
    assert result["held"] > 0 and result["deferred"] is True, result
    assert result["during"] == [True, 0, "whole-iteration CUDA graph of the eager objectives"], result
    assert result["after_fallback"] == [False, 0, "per-update eager path", 0], result
    assert result["bitwise"] is True, result
    assert result["restored"] == [True, True, None], result
    assert result["control_recompiled"] is True, result


def test_a_swap_at_an_iteration_boundary_carries_the_learner_exactly(patched_uni_rl_root: Path) -> None:
    result = run_snippet(patched_uni_rl_root, SWAP)
    assert result["nothing_to_defer"] is False, result  # an uncompiled learner has no path to defer
    assert result["deferred"] is True and result["flag_during"] is True and result["flag_after"] is False
    assert result["frames"]["before_swap"] == 0 and result["frames"]["after"] > 0, result
    assert result["keys_equal"] and result["max_difference"] == 0.0, result
    assert result["metrics_equal"] is True and result["schedulers"][0] == result["schedulers"][1], result
    assert result["control_difference"] > 1e-4, result  # one dry update left in is caught


def test_the_helper_batches_have_the_runners_layout(patched_uni_rl_root: Path) -> None:
    result = run_snippet(
        patched_uni_rl_root,
        """
        import pickle
        from flashsac_runtime.learner.compile_behind import layout_of, zeros_like_layout

        packed = torch.randn(64, 40)
        views = {"obs": packed[:, 0:12], "actions": packed[:, 12:16], "rewards": packed[:, 16],
                 "critic": packed[:, 17:33], "dones": torch.zeros(64, dtype=torch.bool)}
        sizes, layout = layout_of(views)
        rebuilt = zeros_like_layout(*pickle.loads(pickle.dumps((sizes, layout))), torch.device("cpu"))
        meta = lambda t: [list(t.shape), list(t.stride()), t.storage_offset(), str(t.dtype)]
        print(json.dumps({
            "storages": len(sizes),
            "same": all(meta(rebuilt[k]) == meta(v) for k, v in views.items()),
            "shared": rebuilt["obs"].untyped_storage().data_ptr() == rebuilt["critic"].untyped_storage().data_ptr(),
            "zero": all(float(v.float().abs().sum()) == 0.0 for v in rebuilt.values()),
            "control": all(meta(torch.zeros_like(v)) == meta(v) for v in views.values()),
        }))
        """,
    )
    assert result == {"storages": 2, "same": True, "shared": True, "zero": True, "control": False}, result


# Every write to a numerics switch is recorded: the cache keys hold torch's newer fp32_precision (torch 2.9 on),
# which a write of a value the process already has turns from "none" into "ieee".
RECORD_SETS = """
import torch
import flashsac_runtime.learner.compile_behind as cb
sets = []

class Recording:
    def __init__(self, label, owner):
        object.__setattr__(self, "label", label)
        object.__setattr__(self, "owner", owner)
    def __getattr__(self, name):
        return getattr(self.owner, name)
    def __setattr__(self, name, value):
        sets.append(f"{self.label}.{name}")
        setattr(self.owner, name, value)

labels = {id(torch.backends.cuda.matmul): "matmul", id(torch.backends.cudnn): "cudnn", id(torch.backends): "backends"}
cb._NUMERICS_SWITCHES = tuple((name, Recording(labels[id(owner)], owner), attribute)
                              for name, owner, attribute in cb._NUMERICS_SWITCHES)
matmul, cudnn = Recording("matmul", torch.backends.cuda.matmul), Recording("cudnn", torch.backends.cudnn)
precision = torch.set_float32_matmul_precision
def set_precision(value):
    sets.append("float32_matmul_precision")
    precision(value)
torch.set_float32_matmul_precision = set_precision
"""


def test_the_helper_takes_the_runners_numerics_setting_only_what_differs(patched_uni_rl_root: Path) -> None:
    """The helper compiles under the runner's cache keys: its numerics switches end equal to the runner's, and
    a switch already equal is never written (on an H200 with torch 2.11, writing the equal TF32 switches made
    every key differ and the swap compiled again). Control: the former helper, which wrote every switch."""
    tf32_runner = run_snippet(patched_uni_rl_root, """
        import torch
        import flashsac_runtime.learner.compile_behind as cb
        torch.set_float32_matmul_precision("high")
        torch.backends.cudnn.allow_tf32 = False
        print(json.dumps(cb._numerics()))
        """)
    result = run_snippet(patched_uni_rl_root, RECORD_SETS + textwrap.dedent(f"""
        defaults = cb._numerics()
        cb._set_numerics(defaults)
        equal_sets, sets[:] = list(sets), []
        # Control: the former helper wrote every switch, equal or not.
        torch.set_float32_matmul_precision(defaults["float32_matmul_precision"])
        matmul.allow_tf32 = defaults["cuda_matmul_allow_tf32"]
        cudnn.allow_tf32 = defaults["cudnn_allow_tf32"]
        control_sets, sets[:] = list(sets), []
        cb._set_numerics({tf32_runner!r})
        print(json.dumps({{"equal_sets": equal_sets, "control_sets": control_sets, "tf32_sets": sets,
                          "after": cb._numerics(), "defaults": defaults}}))
        """))
    assert result["equal_sets"] == [], result  # nothing written where the runner's value is the helper's own
    assert result["after"] == tf32_runner != result["defaults"], result  # the runner's TF32 switches taken
    assert "float32_matmul_precision" in result["tf32_sets"] and "cudnn.allow_tf32" in result["tf32_sets"], result
    assert len(result["control_sets"]) == 3, result  # the check sees a helper that writes equal values


TRAIN = "src/unilab/scripts/train_flashsac.py"
# 16 envs, batch 32, 2/2: an iteration takes tens of milliseconds on the CPU, the helper several seconds.
CLI = ("task=g1_walk_flat/mujoco", "algo.num_envs=16", "algo.batch_size=32", "algo.replay_buffer_n=8",
       "algo.learning_starts=2", "algo.updates_per_step=2", "algo.policy_frequency=2", "algo.save_interval=0",
       "algo.max_iterations=300", "training.no_play=true", "training.export_onnx=false",
       "training.logger=no_print")
DEVICE = ("training.collector=device", "+training.device_env_factory=device_env_adapter:make_g1_walk_flat_cpu_env")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, applied_session: tuple[Path, Path]) -> tuple[Path, Path]:
    checkout, overlay = applied_session
    return runnable_tree(checkout, tmp_path_factory.mktemp("compile-behind") / "tree"), overlay


def _train(tree: tuple[Path, Path], log_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    root, overlay = tree
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLASHSAC_PROVENANCE_DIR")}
    env["PYTHONPATH"] = os.pathsep.join(map(str, (overlay, root / "src", PROJECT / "experiments" / "profile",
                                                  PROJECT / "tests")))
    env.update(CUDA_VISIBLE_DEVICES="", MUJOCO_GL="disable", FLASHSAC_COMPILE_CACHE_DIR=str(log_dir / "cache"))
    return subprocess.run([sys.executable, "-W", "ignore", TRAIN, *CLI, *extra, f"training.log_dir='{log_dir}'"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False)


@pytest.mark.extended  # three UniLab trainings side by side (about a minute on two cores); the swap's exactness is
# also the default suite's, on the learner itself (test_a_swap_at_an_iteration_boundary_carries_the_learner_exactly)
def test_unilab_trains_with_compile_behind_and_ends_where_the_warmed_run_ends(tree: tuple[Path, Path],
                                                                                tmp_path: Path) -> None:
    behind, warmed = side_by_side(
        lambda: _train(tree, tmp_path / "behind", *DEVICE, "training.compile_behind=true"),
        lambda: _train(tree, tmp_path / "warmed", *DEVICE),  # the tree's auto: off on the CPU
    )
    assert behind.returncode == 0, behind.stderr[-4000:]
    assert warmed.returncode == 0, warmed.stderr[-4000:]
    summary = json.loads((tmp_path / "behind" / "run_summary.json").read_text())
    record = summary["compile_behind"]
    assert record["helper_exit_code"] == 0 and 1 <= record["swap_iteration"] <= 300, record
    assert record["swap_pause_s"] >= 0 and record["swap_after_start_s"] >= record["helper_s"] > 0, record
    # Graph by graph, what the helper and the swap compiled (uni_rl 0014): nothing on the CPU (the learner compiles
    # on CUDA only), but the helper's list came back through its file.
    assert record["helper_frames"] == [] and record["swap_frames"] == [], record
    assert "compile_behind" not in json.loads((tmp_path / "warmed" / "run_summary.json").read_text())
    assert "[compile behind] helper: Learner warm-up" in behind.stderr, behind.stderr[-3000:]
    a = torch.load(tmp_path / "behind" / "model_300.pt", map_location="cpu", weights_only=True)
    b = torch.load(tmp_path / "warmed" / "model_300.pt", map_location="cpu", weights_only=True)
    groups = ("actor", "critic", "target_critic", "temperature")
    differ = [f"{g}.{k}" for g in groups for k, v in a[g].items() if not torch.equal(v, b[g][k])]
    assert differ == [] and a["update_count"] == b["update_count"] == 300, differ[:5]
    print(f"compile behind: swap at iteration {record['swap_iteration']}, helper {record['helper_s']:.1f} s, "
          f"pause {record['swap_pause_s']:.1f} s")


SWITCH = """
import json
from omegaconf import OmegaConf
from unilab.scripts.train_offpolicy import compile_behind_switch

def resolve(value, world_size, device):
    cfg = OmegaConf.create({"training": {} if value is None else {"compile_behind": value}})
    try:
        return compile_behind_switch(cfg, world_size=world_size, device=device)
    except ValueError as exc:
        return str(exc)

cases = [("auto", 1, "cuda:0"), ("auto", 1, "cpu"), ("auto", 2, "cuda:1"), (None, 1, "cuda"), (True, 1, "cpu"),
         (True, 2, "cuda:0"), (False, 1, "cuda:0"), ("maybe", 1, "cuda:0")]
print(json.dumps([resolve(*case) for case in cases]))
"""


def test_compile_behind_is_on_by_default_with_one_rank_on_cuda_and_bad_values_are_refused(
        patched_unilab_root: Path, patched_uni_rl_root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{patched_uni_rl_root}{os.pathsep}{patched_unilab_root / 'src'}")
    proc = subprocess.run([sys.executable, "-c", SWITCH], env=env, capture_output=True, text=True, timeout=240,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    auto_cuda, auto_cpu, auto_ranks, unset, true_cpu, true_ranks, false, bad = json.loads(proc.stdout.splitlines()[-1])
    assert (auto_cuda, auto_cpu, auto_ranks, unset, true_cpu, false) == (True, False, False, True, True, False)
    assert true_ranks == ("training.compile_behind=true runs on one rank, not 2 data-parallel ranks (their swaps to "
                          "the compiled paths would not be agreed)")
    assert bad == "training.compile_behind='maybe': expected auto, true or false"
    config = (patched_unilab_root / "src/unilab/conf/flashsac/config.yaml").read_text()
    assert "\n  compile_behind: auto\n" in config


BUSY_WAIT = """
import threading, time
from multiprocessing import get_context
from uni_rl.offpolicy.worker import _wait_for_inference_tick

ctx = get_context("spawn")

def wait(announced):
    busy, stop, answers = ctx.Event(), ctx.Event(), ctx.Queue()
    def learner():
        if announced:
            busy.set()
        time.sleep(1.5)  # five times the wait's timeout
        busy.clear()
        answers.put(7)
    threading.Thread(target=learner, daemon=True).start()
    start = time.monotonic()
    try:
        got = _wait_for_inference_tick(answers, 7, stop, timeout=0.3, learner_busy=busy)
    except TimeoutError as exc:
        got = str(exc)
    return got, round(time.monotonic() - start, 2)

print(json.dumps({"announced": wait(True), "unannounced": wait(False)}))
"""


def test_the_collector_does_not_count_a_pause_the_learner_announced(patched_uni_rl_root: Path) -> None:
    result = run_snippet(patched_uni_rl_root, BUSY_WAIT)
    answered, waited = result["announced"]
    assert answered is True and waited >= 1.4, result
    message, waited = result["unannounced"]  # the control: the same pause, not announced, times out
    assert message == "Timed out waiting for off-policy inference tick 7" and waited < 1.0, result


ARTIFACTS = """
import os, tempfile
from pathlib import Path
import torch._dynamo
import uni_rl.algos.flash_sac.learner as learner_module
from uni_rl.algos.common import compile as compile_module
from uni_rl.offpolicy.double_buffer_runner import warm_up_cache_file
from flashsac_runtime.learner.compile_behind import CompileBehind

learner_module.get_torch_compile_for_cuda = lambda device, warn=False: (
    lambda fn, options=None, **kwargs: torch.compile(fn, backend="eager", **kwargs))
os.environ["FLASHSAC_COMPILE_CACHE_DIR"] = tempfile.mkdtemp()
SHAPES = dict(num_envs=8, batch_size=32, updates_per_step=2, policy_frequency=2)
obs = torch.zeros(8, 12)
dry = lambda: {k: torch.zeros_like(v) for k, v in batch(0, 64).items()}

real = Path(sys.argv[2]).read_bytes()

def start(content):
    l = learner(use_compile=True, compile_full_objectives=True)
    path = warm_up_cache_file(l, obs_dim=12, **SHAPES)
    compile_module._LOADED.clear()
    for old in path.parent.glob("*"):
        old.unlink()
    if content is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    warmed = []
    behind = CompileBehind.start(l, dry, obs, warm_up=lambda: warmed.append(1), **SHAPES)
    helper = behind is not None and behind.process.is_alive()
    if behind is not None:
        behind.close()
    return {"behind": behind is not None, "helper": helper, "deferred": l.compiled_paths_deferred,
            "loaded": path in compile_module._LOADED}

out = {"real": start(real), "damaged": start(b"not torch's artifacts"), "missing": start(None)}
compile_module._LOADED.clear()
print(json.dumps(out))
"""


def test_with_the_warm_ups_compile_artifacts_at_hand_nothing_compiles_behind(patched_uni_rl_root: Path,
                                                                            tmp_path: Path) -> None:
    """Where the warm-up's compile artifacts load (real ones, saved by torch after an Inductor compile here), the
    learner compiles before tick 0 from them: no helper starts and nothing is deferred. Controls: a damaged
    artifact file and a missing one each start the helper on a deferred learner, as before."""
    saved = tmp_path / "real.bin"  # what torch saves after an Inductor compile on this CPU, in a process of its own
    save = ("import sys, torch; torch.compile(lambda x: x.sin() * 2 + 1)(torch.randn(16)); "
            "open(sys.argv[1], 'wb').write(torch.compiler.save_cache_artifacts()[0])")
    proc = subprocess.run([sys.executable, "-c", save, str(saved)], capture_output=True, text=True, timeout=300,
                          check=False, env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor")))
    assert proc.returncode == 0 and saved.stat().st_size > 0, proc.stderr[-3000:]
    result = run_snippet(patched_uni_rl_root, ARTIFACTS.replace("sys.argv[2]", repr(str(saved))))
    assert result["real"] == {"behind": False, "helper": False, "deferred": False, "loaded": True}, result
    assert result["damaged"] == {"behind": True, "helper": True, "deferred": True, "loaded": False}, result
    assert result["missing"] == {"behind": True, "helper": True, "deferred": True, "loaded": False}, result
