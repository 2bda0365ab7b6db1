"""Validation callback: every ``every_n_iterations`` PPO iterations, evaluate the argmax policy on fixed
validation episodes next to the rule baselines, and keep the checkpoint with the best validation success rate.

Selection rule (fixed before any evaluation): highest mean validation success rate; ties go to the earlier
iteration. Validation roots must be disjoint from the evaluation roots (0–4) and from the training root.
With ``settings`` (PPO across a suite of clusters, ``mat.validation.suite``) the same roots are run on every
setting's cluster at its load, and the score is the mean over settings of their mean success rates (each setting
weighs the same, whatever its size); the training cluster's own rate is logged as ``val/setting_0`` and so on.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torchmetrics import MeanMetric

from mara.core.config import build_allocators, load_method_cfg
from mara.core.registry import validation_baselines
from mara.mat.allocator import PolicyAllocator
from mara.mat.settings import ValidationSetting
from mara.predictors.factory import predictor_from
from mara.predictors.fm.val_metrics import rank_share
from mara.sim.env import BatchedEnv, run_episodes
from mara.sim.settings import SimSettings
from mara.sim.workload import PAPER_TASK_SETS, EpisodeBatch, generate_episodes

EVAL_ROOTS = range(0, 5)
#: validation.json's fields, each the callback's state entry it shows
SUMMARY_NAMES = {
    "best_ckpt": "best_path",
    "best_iteration": "best_iteration",
    "val_success_rate": "best_score",
    "val_baselines": "baselines",
    "history": "history",
}


def validation_episodes(
    bank, roots, n_episodes: int, task_set: str = "ID", load: float = 0.04, n_steps: int = 500
) -> EpisodeBatch:
    """The validation workload: ``n_episodes`` per root, stacked."""
    if any(r in EVAL_ROOTS for r in roots):
        raise ValueError(f"validation roots {list(roots)} overlap the evaluation roots {list(EVAL_ROOTS)}")
    return EpisodeBatch.concat(
        [
            generate_episodes(bank, bank.family_params, PAPER_TASK_SETS[task_set], load, r, n_episodes, n_steps=n_steps)
            for r in roots
        ]
    )


def baseline_allocators() -> dict:
    """The validation baselines (``validation_baseline: true`` in conf/method) with the predictor each reads:
    name -> (allocator factory, predictor name)."""
    out = {}
    for name in validation_baselines():
        mcfg = load_method_cfg(name)
        out[name] = (lambda mcfg=mcfg: build_allocators(mcfg)[0][1], mcfg.get("predictor"))
    return out


class ValidationCallback(L.Callback):
    def __init__(
        self,
        dirpath: str,
        roots,
        n_episodes: int,
        every_n_iterations: int,
        sim: SimSettings,
        scale: float = 350.0,
        baselines: bool = True,
        task_set: str = "ID",
        load: float = 0.04,
        at_start: bool = False,
        settings: list[ValidationSetting] | None = None,
    ) -> None:
        # settings: the clusters to validate on, each weighing the same; None: the training cluster ``sim`` at
        # ``load``. The baselines run on the first one.
        self.settings = list(settings) if settings else [ValidationSetting(sim, load)]
        self.at_start = (
            at_start  # also validate (and checkpoint) the policy before the first PPO iteration (iteration 0)
        )
        self.dirpath, self.roots, self.n_episodes = Path(dirpath), list(roots), n_episodes
        self.task_set = task_set
        self.every, self.scale, self.with_baselines = every_n_iterations, scale, baselines
        self.best_score, self.best_iteration, self.best_path = -np.inf, -1, None
        self.baselines: dict[str, float] = {}
        self.history: list[dict] = []
        self.success = MeanMetric().set_dtype(torch.float64)  # episodes' success rates, reduced over DDP ranks

    @staticmethod
    def _env(pl_module, predictor, episodes, sim: SimSettings, fm_cache=None):
        """The validation env of ``episodes`` on cluster ``sim`` (the training nodes, or a setting's)."""
        return BatchedEnv(
            episodes,
            pl_module.env.bank,
            n_nodes=sim.nodes,
            max_active=sim.max_active,
            obs_every=sim.obs_every,
            predictor=predictor,
            fm_cache=fm_cache,
            **sim.env_options(),
        )

    def on_fit_start(self, trainer, pl_module) -> None:

        self.set_episodes = [
            validation_episodes(
                pl_module.env.bank, self.roots, self.n_episodes, self.task_set, st.load, n_steps=st.sim.steps
            )
            for st in self.settings
        ]
        if self.with_baselines and not self.baselines:
            for name, (cls, pred_name) in baseline_allocators().items():
                m = run_episodes(
                    self._env(
                        pl_module,
                        predictor_from(pred_name, pl_module.env.bank.path),
                        self.set_episodes[0],
                        self.settings[0].sim,
                    ),
                    cls(),
                )
                self.baselines[name] = float(np.mean(m["success_rate"]))

    def on_train_start(self, trainer, pl_module) -> None:
        if self.at_start and trainer.current_epoch == 0 and not self.history:
            self._validate(trainer, pl_module, 0)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        it = trainer.current_epoch + 1
        if it % self.every and not trainer.should_stop and it < trainer.max_epochs:
            return
        self._validate(trainer, pl_module, it)

    def _validate(self, trainer, pl_module, it: int) -> None:
        t0 = time.time()
        was_training = pl_module.policy.training
        pl_module.policy.eval()
        per_setting = []
        for st, episodes in zip(self.settings, self.set_episodes):
            share = rank_share(episodes.E, trainer.global_rank, trainer.world_size)  # this rank's episodes
            if len(share):
                # the policy's own predictor: its FM cache (filled by training) serves the validation episodes too
                env = self._env(
                    pl_module,
                    pl_module.env.predictor,
                    episodes.take(share),
                    st.sim,
                    getattr(pl_module, "fm_cache", None),
                )
                m = run_episodes(env, PolicyAllocator(pl_module.policy, True, self.scale))
                self.success.to(pl_module.device).update(torch.as_tensor(m["success_rate"], dtype=torch.float64))
            per_setting.append(
                float(self.success.compute())
            )  # mean over every rank's episodes (a collective under DDP)
            self.success.reset()
        pl_module.policy.train(was_training)
        score = float(np.mean(per_setting))
        log = {"val/success_rate": score, **{f"val/{k}": v for k, v in self.baselines.items()}}
        if len(per_setting) > 1:
            log.update({f"val/setting_{i}": v for i, v in enumerate(per_setting)})
        improved = score > self.best_score
        if improved:
            self.best_score, self.best_iteration = score, it
            self.best_path = str(self.dirpath / "best.ckpt")
        log["val/best_success_rate"] = self.best_score
        if it > 0:  # iteration 0 (before training) is recorded in the history only
            pl_module.log_dict(log, on_step=False, on_epoch=True, batch_size=1)
        self.history.append(
            {
                "iteration": it,
                "env_steps": pl_module.global_env_steps,
                "val_success_rate": score,
                **({"val_settings": per_setting} if len(per_setting) > 1 else {}),
                "seconds": time.time() - t0,
            }
        )
        if improved:  # collective under DDP: every rank calls it, rank 0 writes
            trainer.save_checkpoint(self.best_path)

    def on_train_end(self, trainer, pl_module) -> None:
        if trainer.is_global_zero:
            self.dirpath.mkdir(parents=True, exist_ok=True)
            (self.dirpath / "validation.json").write_text(json.dumps(self.summary(), indent=1))

    def summary(self) -> dict:
        """validation.json: the callback's state (:meth:`state_dict`) under the names the report reads."""
        state = self.state_dict()
        return {name: state[key] for name, key in SUMMARY_NAMES.items()}

    def state_dict(self) -> dict:
        return {
            "best_score": self.best_score,
            "best_iteration": self.best_iteration,
            "best_path": self.best_path,
            "baselines": self.baselines,
            "history": self.history,
        }

    def load_state_dict(self, state: dict) -> None:
        self.best_score, self.best_iteration = state["best_score"], state["best_iteration"]
        self.baselines, self.history = state["baselines"], state["history"]
        # this folder's best.ckpt: a run folder copied or moved before it resumed keeps using its own files
        self.best_path = str(self.dirpath / "best.ckpt") if state["best_path"] else None
