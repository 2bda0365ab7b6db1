"""PPO for the MAT allocator inside Lightning: one ``training_step`` = one PPO iteration (manual optimisation).

Rollout under ``inference_mode`` from the rank's own ``TrainingEnv`` → GAE → ``update_epochs`` × minibatches
(mara/mat/ppo.py) with ``manual_backward`` (DDP all-reduces the gradients) and ``clip_gradients``. Every rank runs
the same number of minibatches so the collective calls line up; training stops once the env steps of all ranks
reach ``total_env_steps``.

PPO across a suite of clusters (``mat.rollout.suite: true``, recipe mat=suite_ppo): one ``TrainingEnv`` per setting
of ``mat.imitation.suite`` (mara/mat/suite.py), and PPO iteration i collects its rollout in setting ``i mod S`` — one
cluster per rollout, so M and K fix the shapes of a batch, every setting the same share of iterations. The value head
reads the v3 tokens, which describe the cluster, so its baseline depends on the setting (an input-dependent baseline).
"""

from __future__ import annotations

import lightning as L
import torch
from torch.utils.data import DataLoader

from mara.core.safe_load import CheckpointError, plain_lightning_checkpoint
from mara.mat import ppo as ppo_step
from mara.mat.allocator import policy_weights, read_policy_checkpoint
from mara.mat.imitation import build_teacher, imitate
from mara.mat.losses import explained_variance, gae
from mara.mat.nets import MATPolicy
from mara.mat.rollout import EpisodeStream, TrainingEnv, collect_rollout
from mara.mat.settings import (
    ImitationSettings,
    MatSettings,
    SuiteSetting,
    recorded_net,
    scaled_loads,
    setting_sim,
)
from mara.mat.suite import imitate_suite, rollout_setting, suite_settings
from mara.predictors.factory import load_bank_and_predictor
from mara.predictors.fm.cache import FlowSampleCache
from mara.sim.settings import SimSettings


class MATModule(L.LightningModule):
    """The policy and its PPO training, from typed settings; ``hparams`` is ``settings.recorded()``, what the
    checkpoint keeps."""

    def __init__(self, settings: MatSettings) -> None:
        super().__init__()
        self.settings = settings
        self.imitation = settings.module_imitation()  # a resumed run is past the imitation (keeps its suite)
        self.init_from = None if settings.ckpt_path else settings.init_from  # a resumed run has its weights
        self.save_hyperparameters(settings.recorded())
        self.automatic_optimization = False
        self.policy = MATPolicy(
            n_slots=settings.sim.max_active, n_nodes=settings.sim.nodes, **recorded_net(settings.net)
        )
        self.env: TrainingEnv | None = None  # built per rank in setup()
        self.fm_cache = None  # FlowSampleCache of this rank, shared by its training, imitation and validation envs
        self.generator: torch.Generator | None = None
        self.global_env_steps = 0
        self._pending_env_state = None

    # ----------------------------------------------------------------- setup
    def setup(self, stage: str) -> None:

        st = self.settings
        torch.set_num_threads(st.num_threads)
        bank, predictor = load_bank_and_predictor(st.bank_path, st.predictor)
        rank, world = self.global_rank, self.trainer.world_size if self._trainer is not None else 1
        self.fm_cache = None
        if st.rollout.fm_cache and getattr(predictor, "supports_cache", False):
            self.fm_cache = FlowSampleCache(int(st.rollout.fm_cache_entries))
        if st.rollout.suite:  # one env per cluster PPO steps: every setting of the suite
            self.envs = self.suite_envs(bank, predictor, rank, world)
        else:  # the training cluster
            self.envs = [
                self.training_env(
                    bank,
                    predictor,
                    st.sim,
                    st.workload.load,
                    st.workload.train_root + st.seed,
                    st.rollout.n_episodes,
                    st.rollout.stagger,
                    rank,
                    world,
                )
            ]
        self.env = self.envs[0]
        self.generator = torch.Generator().manual_seed(st.seed * 1000 + rank)
        if self._pending_env_state is not None:
            self._restore_env(self._pending_env_state)
        elif self.init_from and not getattr(self, "initialised", False):
            # PPO from a trained policy's weights, instead of the imitation
            self.policy.load_state_dict(policy_weights(read_policy_checkpoint(self.init_from)))
            self.initialised = True
        elif self.imitation is not None and self.imitation.enabled and not getattr(self, "imitation_report", None):
            self.imitation_report = self.warm_start(bank, predictor)

    def warm_start(self, bank, predictor) -> dict:
        """Imitation warm start (``mat.imitation``): clone the teacher rule into the policy before PPO."""

        st, im = self.settings, self.imitation
        if im.suite:
            return self.warm_start_suite(bank, predictor)
        # a rule teacher reads the estimates the simulator carries, i.e. MAT's own frozen predictor; Slack-Truth
        # (privileged DAgger teacher) labels states with the true remaining batches the simulator holds
        teacher = build_teacher(im.teacher)

        def make_env(r: int) -> TrainingEnv:  # fresh training episodes per round (never evaluation/validation roots)
            return self.imitation_env(
                bank, predictor, st.sim, st.workload.load, st.workload.train_root + st.seed + 7919 * (r + 1)
            )

        return imitate(
            self.policy, make_env, teacher, im, seed=st.seed, scale=st.rollout.scale, log=lambda s: print(s, flush=True)
        )

    def warm_start_suite(self, bank, predictor) -> dict:
        """Imitation across the settings of ``mat.imitation.suite`` (mara/mat/suite.py): one network, each setting's
        own teacher, loads at the training loads' pressure per node."""
        st, im = self.settings, self.imitation
        settings = suite_settings(im, im.teacher)
        teachers = {name: build_teacher(name) for name in {s.teacher for s in settings}}

        def make_env(setting: SuiteSetting, r: int) -> TrainingEnv:  # fresh training episodes per setting and round
            sim = setting_sim(st.sim, setting)
            root = st.workload.train_root + st.seed + 7919 * (r + 1) + 104729 * (settings.index(setting) + 1)
            return self.imitation_env(bank, predictor, sim, scaled_loads(st.workload.load, sim.nodes), root)

        return imitate_suite(
            self.policy,
            settings,
            make_env,
            teachers,
            im,
            seed=st.seed,
            scale=st.rollout.scale,
            log=lambda s: print(s, flush=True),
        )

    def suite_envs(self, bank, predictor, rank: int, world: int) -> list[TrainingEnv]:
        """The PPO training env of every suite setting (the rollout's episodes and groups; loads at the training
        loads' pressure per node), on training roots of their own (``train_root + seed + 104729·(i+1)``: the
        imitation rounds add ``7919·(round+1)`` to the same, so no episode block is shared)."""
        st = self.settings
        out = []
        for i, setting in enumerate(suite_settings(self.imitation or ImitationSettings(), "")):
            sim = setting_sim(st.sim, setting)
            out.append(
                self.training_env(
                    bank,
                    predictor,
                    sim,
                    scaled_loads(st.workload.load, sim.nodes),
                    st.workload.train_root + st.seed + 104729 * (i + 1),
                    st.rollout.n_episodes,
                    st.rollout.stagger,
                    rank,
                    world,
                )
            )
        return out

    def imitation_env(self, bank, predictor, sim: SimSettings, load, root: int) -> TrainingEnv:
        """A training env of ``mat.imitation``'s episodes (its ``n_episodes``, ``stagger``) on cluster ``sim`` at
        ``load`` from ``root``."""
        im = self.imitation
        stagger = self.settings.rollout.stagger if im.stagger is None else im.stagger
        return self.training_env(bank, predictor, sim, load, root, im.n_episodes, stagger)

    def training_env(
        self,
        bank,
        predictor,
        sim: SimSettings,
        load,
        root: int,
        n_episodes: int,
        stagger: int,
        rank: int = 0,
        world: int = 1,
    ) -> TrainingEnv:
        """A ``TrainingEnv`` of ``n_episodes`` on cluster ``sim`` at ``load`` from ``root`` (this rank's share of its
        episode blocks), in ``rollout.n_groups`` groups, sharing this rank's FM cache."""
        st = self.settings
        stream = EpisodeStream(
            bank, bank.family_params, st.workload.task_set, load, root, n_episodes, rank, world, n_steps=sim.steps
        )
        return TrainingEnv(
            stream,
            bank,
            predictor,
            st.reward,
            sim.beta,
            sim.nodes,
            sim.max_active,
            sim.obs_every,
            st.rollout.n_groups,
            stagger,
            fm_cache=self.fm_cache,
            **sim.env_options(),
        )

    def train_dataloader(self):
        return DataLoader([0], batch_size=None)  # one PPO iteration per epoch

    def configure_optimizers(self):
        return torch.optim.Adam(self.policy.parameters(), lr=self.settings.ppo.lr, eps=1e-5)

    # -------------------------------------------------------------- training
    def training_step(self, batch, batch_idx):
        st, ppo = self.settings, self.settings.ppo
        opt = self.optimizers()
        if ppo.anneal_lr:  # linear decay to 0 over the env-step budget (CleanRL)
            frac = max(1.0 - self.global_env_steps / st.total_env_steps, 0.0)
            for group in opt.optimizer.param_groups:
                group["lr"] = frac * ppo.lr
        self.env = self.envs[rollout_setting(self.current_epoch, len(self.envs))]  # this iteration's cluster
        buf = collect_rollout(self.policy, self.env, st.rollout.n_steps, self.generator, st.rollout.scale)
        advantages, returns = gae(buf.rewards, buf.values, buf.dones, buf.last_value, ppo.gamma, ppo.gae_lambda)
        batch = ppo_step.flatten(buf, advantages, returns)
        value_only = self.current_epoch < ppo.value_warmup_iterations  # fit the value head to a cloned policy first
        stats = ppo_step.update(
            self.policy,
            opt,
            batch,
            ppo,
            ppo_step.n_minibatches(ppo, st.rollout),
            self.generator,
            self.manual_backward,
            lambda: self.clip_gradients(opt, gradient_clip_val=ppo.max_grad_norm, gradient_clip_algorithm="norm"),
            value_only=value_only,
        )
        self._log_iteration(stats, batch["values"], batch["returns"], int(buf.live.sum()))

    def _log_iteration(self, stats, b_values, b_returns, n_live: int) -> None:
        steps = self.trainer.strategy.reduce(torch.tensor(float(n_live), device=self.device), reduce_op="sum")
        self.global_env_steps += int(steps)
        log = {f"train/{k}": sum(v) / len(v) for k, v in stats.items()}
        log["train/explained_variance"] = explained_variance(b_values, b_returns)
        log["train/lr"] = self.optimizers().optimizer.param_groups[0]["lr"]
        self.log_dict(log, on_step=False, on_epoch=True, batch_size=1, sync_dist=True)  # mean over ranks
        self.log(
            "env_steps", float(self.global_env_steps), on_step=False, on_epoch=True, batch_size=1
        )  # already global
        if self.fm_cache is not None:  # reuse of FM network outputs (cumulative since the start of this process)
            st = self.fm_cache.stats()
            self.log_dict(
                {"rollout/fm_cache_hit_rate": float(st["hit_rate"]), "rollout/fm_cache_entries": float(st["entries"])},
                on_step=False,
                on_epoch=True,
                batch_size=1,
                rank_zero_only=True,
            )
        successes, returns = self.env.pop_finished()
        if successes:  # episodes that finished on this rank during the rollout (rank 0's are what gets logged)
            self.log_dict(
                {
                    "rollout/success_rate": sum(successes) / len(successes),
                    "rollout/return": sum(returns) / len(returns),
                },
                on_step=False,
                on_epoch=True,
                batch_size=1,
                rank_zero_only=True,
            )
        if self.global_env_steps >= self.settings.total_env_steps:
            self.trainer.should_stop = True

    def on_train_start(self) -> None:
        if self.global_env_steps >= self.settings.total_env_steps:  # resumed from the checkpoint of a finished training
            self.trainer.should_stop = True

    # --------------------------------------------------------- checkpointing
    def on_save_checkpoint(self, checkpoint: dict) -> None:
        plain_lightning_checkpoint(checkpoint)  # tensors and plain values only: loads with weights_only=True
        checkpoint["kind"] = "policy"
        checkpoint["mat_state"] = {
            "global_env_steps": self.global_env_steps,
            "generator": self.generator.get_state(),
            "env": self.envs[0].state_dict(),
            "rank": self.global_rank,
            "stream_counter": self.envs[0].episode_stream.counter,
        }
        if len(self.envs) > 1:  # PPO across a suite: every setting's env continues where it was
            checkpoint["mat_state"]["suite_envs"] = [e.state_dict() for e in self.envs[1:]]

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        state = checkpoint.get("mat_state")
        if state is None:
            return
        if self.env is None:  # restored before setup(): keep until the env exists
            self._pending_env_state = state
        else:
            self._restore_env(state)

    def _restore_env(self, state: dict) -> None:
        self.global_env_steps = state["global_env_steps"]
        saved = [state["env"], *state.get("suite_envs", [])]
        if len(saved) != len(self.envs):
            raise CheckpointError(
                f"the checkpoint's MAT training state holds {len(saved)} training clusters, this "
                f"recipe steps {len(self.envs)} (mat.rollout.suite and mat.imitation.suite must be "
                f"those of the run that wrote it)"
            )
        if state.get("rank", 0) == self.global_rank:
            self.generator.set_state(state["generator"])
            for env, env_state in zip(self.envs, saved):
                env.load_state_dict(env_state)
        else:  # only rank 0's envs are checkpointed: other ranks continue on fresh, unseen episode batches
            for env, env_state in zip(self.envs, saved):
                env.episode_stream.counter = int(env_state["counter"]) + env.n_groups
                env.restart()
            self.generator.manual_seed(self.settings.seed * 1000 + self.global_rank + 7919 * state["stream_counter"])
        self._pending_env_state = None
