"""The learner's warm-up compiles every frame once (uni_rl 0003, 0005), on the CPU.

A recompile is a second Dynamo trace and compile of the same code object after its guards
failed; on a fresh GPU host each one adds to the cold start, and Dynamo compiles the second
one with dynamic shapes (every size the two calls differ in). What compiles, how often and
why is Dynamo's decision, taken before any backend runs, so the snippets compile with its
``eager`` backend: the same frames, guards and recompiles as Inductor, in seconds instead of
minutes of C++ code generation on two cores. The learner's CUDA-only compile gate is lifted
as ``validate_numerics``' ``compile_on_cpu`` does.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from snippets import run_snippet

COUNT = """
import collections
import torch._dynamo
from torch._dynamo.utils import clear_compilation_metrics, get_compilation_metrics
import uni_rl.algos.flash_sac.learner as learner_module

def dynamo_only(fn, options=None, **kwargs):
    return torch.compile(fn, backend="eager", **kwargs)

learner_module.get_torch_compile_for_cuda = lambda device, warn=False: dynamo_only

def compiled():
    \"\"\"Compiles per frame (name:line) since the last reset, and each recompile's failed guard.\"\"\"
    metrics = list(get_compilation_metrics())
    counts = collections.Counter(f"{m.co_name}:{m.co_firstlineno}" for m in metrics)
    guards = {f"{m.co_name}:{m.co_firstlineno}": m.recompile_reason.strip()
              for m in metrics if m.recompile_reason}
    return dict(counts), guards

def warmed_up(share_restore=False):
    \"\"\"A compiled, guarded learner after the runner's warm-up, with every guarded site compiled.

    ``_guard_on_device`` takes CUDA's branch (fused Adam reads ``found_inf``) so that the
    device-side re-normalization and Polyak update compile too; the CPU's Adam ignores
    ``found_inf``, and on the finite dry batch no step is skipped either way.
    \"\"\"
    torch._dynamo.reset()
    clear_compilation_metrics()
    l = learner(use_compile=True, compile_full_objectives=True, finite_guard=True,
                deferred_metrics=True, obs_normalization=True)
    l._guard_on_device = True
    if share_restore:  # negative control: one compiled restore for both steps, as before the fix
        l._guarded_restore_actor_statistics = l._guarded_restore_critic_statistics
    dry = {k: torch.zeros_like(v) for k, v in batch(0).items()}
    l.warm_up(dry, inference_obs=dry["obs"])
    return l
"""


def test_warm_up_compiles_every_frame_once(patched_uni_rl_root: Path) -> None:
    """Each compiled frame of the warm-up compiles once, and training compiles nothing more.

    Negative controls: a Python attribute the Polyak frame reads (``tau``) changed after the
    warm-up makes that frame compile again, with its guard named; and one compiled statistics
    restore serving the critic and the actor step (the warm-up before the fix) compiles twice
    in the warm-up itself, on the guard that failed on the GPU host (``len(saved) == ...``).
    The run's record of the compiles (``flashsac_runtime.learner.compile_record``) reads the same.
    """
    result = run_snippet(
        patched_uni_rl_root,
        COUNT
        + textwrap.dedent(
            """
        from flashsac_runtime.learner.compile_record import frame_compiles, now_us

        since = now_us()
        l = warmed_up()
        warm_up, warm_up_guards = compiled()
        recorded = frame_compiles(since)
        for i in range(2):
            l.update_critic(batch(1 + i)); l.update_actor(batch(1 + i)); l.soft_update_target()
        l.read_deferred_metrics()
        training, _ = compiled()
        moment = now_us()
        l.tau = l.tau * 0.5
        l.soft_update_target()
        changed_tau, changed_tau_guards = compiled()
        recorded_after = frame_compiles(moment)
        warmed_up(share_restore=True)
        shared, shared_guards = compiled()
        print(json.dumps({"warm_up": warm_up, "warm_up_guards": warm_up_guards, "training": training,
                          "changed_tau": changed_tau, "changed_tau_guards": changed_tau_guards,
                          "shared": shared, "shared_guards": shared_guards, "recorded": recorded,
                          "recorded_after": recorded_after}))
        """
        ),
    )
    warm_up = result["warm_up"]
    frames = {key.split(":")[0] for key in warm_up}
    # Every compiled function of the per-update path ran in the warm-up, each a frame of its own.
    assert frames == {
        "_critic_objective_eager", "_actor_objective_eager", "get_mean_and_std",
        "_guarded_restore_critic_statistics_eager", "_guarded_restore_actor_statistics_eager",
        "_guarded_restore_normalizer_statistics_eager", "_guarded_normalize_critic_eager",
        "_guarded_normalize_actor_eager", "_guarded_polyak_eager",
    }, warm_up
    assert all(count == 1 for count in warm_up.values()), (warm_up, result["warm_up_guards"])
    assert result["training"] == warm_up  # training after the warm-up compiles nothing

    polyak = next(key for key in warm_up if key.startswith("_guarded_polyak_eager"))
    assert result["changed_tau"][polyak] == 2
    assert "tau" in result["changed_tau_guards"][polyak]

    restore = next(key for key in result["shared"] if key.startswith("_guarded_restore_critic_statistics"))
    assert result["shared"][restore] == 2
    assert "len(saved) ==" in result["shared_guards"][restore]

    # The run's record of these compiles, graph by graph (compile_record, uni_rl 0014): each warm-up frame once,
    # with its seconds and graph size; read from a later moment, only the recompile since, with its guard (the
    # warm-up's compiles, made before that moment, are not among them: the control).
    recorded = result["recorded"]
    assert sorted(f["frame"] for f in recorded) == sorted(frames), recorded
    assert all(f["compile_s"] > 0 and f["graph_ops"] > 0 and f["recompile_reason"] is None and f["failed"] is None
               for f in recorded), recorded
    after = result["recorded_after"]
    assert [f["frame"] for f in after] == ["_guarded_polyak_eager"] and "tau" in after[0]["recompile_reason"], after

