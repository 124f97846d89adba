"""The actor's forward for the collector's action requests, as one CUDA graph replay."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from flashsac_runtime import cuda_capture

if TYPE_CHECKING:
    from uni_rl.algos.flash_sac.network import FlashSACActor


class GraphedExplorePolicy:
    """``explore`` of a FlashSAC actor whose network forward is one CUDA graph replay.

    The learner answers the collector's action request of every tick with the actor's
    forward: a few dozen small kernels, each a host launch, while the collector waits.
    Only ``get_mean_and_std(obs, training=False)`` is captured. It reads parameters and
    BatchNorm statistics, which every update path changes in place (so the replay sees
    the current policy), and draws no random numbers. The exploration noise (its
    data-dependent resampling and random draws) stays eager in ``FlashSACActor.explore``,
    so the actions are the eager actions for the same mean and std.

    Keyed on the observation's shape and dtype: another key captures again. A capture
    failure calls ``on_failure`` with the reason once and serves eagerly from then on.
    The returned mean and std live in the graph's output buffers until the next replay;
    ``explore`` consumes them at once.
    """

    def __init__(self, actor: FlashSACActor, on_failure: Callable[[str], None]) -> None:
        self.actor = actor
        self._on_failure = on_failure
        self._failed = False
        self._key: tuple[tuple[int, ...], torch.dtype] | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_obs: torch.Tensor | None = None
        self._static_out: tuple[torch.Tensor, torch.Tensor] | None = None

    @property
    def captured(self) -> bool:
        return self._graph is not None and not self._failed

    def explore(
        self,
        obs: torch.Tensor,
        dones: torch.Tensor | None = None,
        deterministic: bool = False,
        sync_free: bool = False,
    ) -> torch.Tensor:
        return self.actor.explore(
            obs,
            dones=dones,
            deterministic=deterministic,
            mean_and_std=self.mean_and_std(obs),
            sync_free=sync_free,
        )

    def mean_and_std(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The replayed forward for ``obs``; None (eager) after a capture failure."""
        if self._failed:
            return None
        if self._key != (tuple(obs.shape), obs.dtype):
            try:
                self._capture(obs)
            except RuntimeError as exc:
                self._failed = True
                self._graph = self._static_obs = self._static_out = None
                self._on_failure(f"capture failed: {exc}")
                return None
        assert self._graph is not None and self._static_obs is not None
        self._static_obs.copy_(obs)
        self._graph.replay()
        return self._static_out

    def _capture(self, obs: torch.Tensor) -> None:
        static_obs = torch.empty(obs.shape, dtype=obs.dtype, device=obs.device)
        static_obs.copy_(obs)
        current = torch.cuda.current_stream(obs.device)
        side = torch.cuda.Stream(device=obs.device)
        side.wait_stream(current)
        with torch.no_grad(), torch.cuda.stream(side):
            # Eager runs first on a side stream, as capture requires (cuBLAS workspaces,
            # lazy initialization); they change no state (BatchNorm in eval mode).
            for _ in range(2):
                self.actor.get_mean_and_std(static_obs, training=False)
        current.wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), cuda_capture.capture(graph):
            mean, std = self.actor.get_mean_and_std(static_obs, training=False)
        self._graph, self._static_obs, self._static_out = graph, static_obs, (mean, std)
        self._key = (tuple(obs.shape), obs.dtype)
