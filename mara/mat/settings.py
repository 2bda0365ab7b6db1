"""Typed settings of a MAT policy's training, parsed once at the entry point (mara/train_settings.py).

``MatSettings`` holds the recipe (conf/mat/*.yaml) with the pipeline's shared keys laid over it: the network, PPO,
the rollout, the cluster (``SimSettings``, the evaluation's own), the training workload, the validation, the
imitation warm start and the Lightning trainer. Every module of mara/mat reads these attributes; ``recorded()`` is
what a policy checkpoint keeps of them (``hyper_parameters``), the keys the shipped policies hold, so shipped and
new policies read alike.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mara.sim.settings import SimSettings

PAPER_NODES = 7  # the loads of the paper's protocol are per step on its 7 nodes


@dataclass(frozen=True)
class PPOSettings:
    """``mat.ppo``: the clipped-surrogate update (CleanRL's names)."""

    lr: float = 2.5e-4
    gamma: float = 1.0
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    vf_coef: float = 1.0
    ent_coef: float = 0.01
    max_grad_norm: float = 0.5
    update_epochs: int = 4
    n_minibatches: int = 4
    minibatch_size: int | None = None  # samples per minibatch; None: n_minibatches per epoch
    norm_adv: bool = True
    anneal_lr: bool = True
    value_warmup_iterations: int = 0
    value_warmup_head_only: bool = False


@dataclass(frozen=True)
class RolloutSettings:
    """``mat.rollout``: E episodes × T steps per PPO iteration, in staggered groups; ``suite``: one cluster of the
    imitation suite per iteration."""

    n_episodes: int = 512
    n_steps: int = 32
    n_groups: int = 4
    stagger: int = 150
    fm_cache: bool = False
    fm_cache_entries: int = 100_000
    scale: float = 350.0
    suite: bool = False


@dataclass(frozen=True)
class WorkloadSettings:
    """``mat.workload``: the task set, the training load (a tuple: batches cycle through them) and the training
    root (+ seed)."""

    task_set: str = "ID"
    load: float | tuple[float, ...] = 0.04
    train_root: int = 100_000


@dataclass(frozen=True)
class ValidationSettings:
    """``mat.validation``: checkpoint selection on fixed episodes (never the evaluation roots 0–4)."""

    roots: tuple[int, ...] = (1000, 1001, 1002, 1003, 1004)
    n_episodes: int = 12
    every_n_iterations: int = 6
    baselines: bool = True
    at_start: bool = False
    load: float | None = None  # None: the training load (the highest of a tuple)
    suite: bool = False


@dataclass(frozen=True)
class ValidationSetting:
    """One cluster the validation runs on, at its load."""

    sim: SimSettings
    load: float


@dataclass(frozen=True)
class SuiteEntry:
    """One entry of ``mat.imitation.suite`` as configured (None: not given; ``SuiteSetting`` fills the defaults)."""

    nodes: int
    max_active: int
    node_speed: tuple[int, ...] | None = None
    switch_cost: int | None = None
    teacher: str | None = None

    def recorded(self) -> dict:
        """The entry as configured: the keys given, plain."""
        out = {"nodes": self.nodes, "max_active": self.max_active}
        if self.node_speed is not None:
            out["node_speed"] = list(self.node_speed)
        if self.switch_cost is not None:
            out["switch_cost"] = self.switch_cost
        if self.teacher is not None:
            out["teacher"] = self.teacher
        return out


@dataclass(frozen=True)
class SuiteSetting:
    """A cluster of the suite with its teacher: M nodes, K slots, node speeds (None: all 1), switch cost."""

    n_nodes: int
    max_active: int
    node_speed: tuple[int, ...] | None
    switch_cost: int
    teacher: str

    def report(self) -> dict:
        """The setting, JSON-plain (the imitation report's ``settings``)."""
        out = asdict(self)
        out["node_speed"] = None if self.node_speed is None else list(self.node_speed)
        return out


@dataclass(frozen=True)
class ImitationSettings:
    """``mat.imitation``: clone a rule teacher (BC, then DAgger rounds) before PPO; ``suite``: across clusters."""

    enabled: bool = False
    teacher: str | None = None
    n_episodes: int = 64
    n_steps: int = 300
    stagger: int | None = None  # None: the rollout's
    dagger_rounds: int = 1
    epochs: int = 8
    lr: float = 1e-3
    batch_size: int = 512
    suite: tuple[SuiteEntry, ...] = ()

    def settings(self, default_teacher: str) -> list[SuiteSetting]:
        """The suite's clusters, each with its teacher (``default_teacher`` where an entry names none)."""
        return [
            SuiteSetting(s.nodes, s.max_active, s.node_speed, int(s.switch_cost or 0), s.teacher or default_teacher)
            for s in self.suite
        ]

    def recorded(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "suite"}
        if self.suite:
            out["suite"] = [s.recorded() for s in self.suite]
        return out


@dataclass(frozen=True)
class TrainerSettings:
    """The Lightning trainer of the policy stage."""

    accelerator: str = "cpu"
    devices: Any = 1
    strategy: str = "auto"
    deterministic: bool = False

    @property
    def world(self) -> int:
        """Processes that step episodes (``devices`` given as a list: one)."""
        return self.devices if isinstance(self.devices, int) else 1


@dataclass(frozen=True)
class MatSettings:
    """Everything a MAT policy's training reads. ``net``: the network's constructor arguments (``MATPolicy``) as the
    recipe gives them; ``predictor``: the frozen predictor's config (plain, as ``predictor_from`` takes it; None: no
    estimates); ``ckpt_path``: resume; ``init_from``: PPO from a policy's weights; ``output_dir`` None: a fresh
    timestamped folder."""

    net: dict
    sim: SimSettings = field(default_factory=SimSettings)
    ppo: PPOSettings = field(default_factory=PPOSettings)
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    workload: WorkloadSettings = field(default_factory=WorkloadSettings)
    validation: ValidationSettings = field(default_factory=ValidationSettings)
    imitation: ImitationSettings = field(default_factory=ImitationSettings)
    trainer: TrainerSettings = field(default_factory=TrainerSettings)
    reward: str = "dense"
    predictor: dict | None = None
    bank_path: str | None = None
    seed: int = 0
    total_env_steps: int = 100_000
    num_threads: int = 1
    init_from: str | None = None
    ckpt_path: str | None = None
    output_dir: str | None = None
    run_name: str | None = None

    @property
    def predictor_name(self) -> str | None:
        return None if self.predictor is None else self.predictor.get("name")

    def resumed(self, ckpt_path: str | None) -> "MatSettings":
        """The same training, resumed from ``ckpt_path`` (None: from the start)."""
        return replace(self, ckpt_path=ckpt_path)

    def module_imitation(self) -> ImitationSettings | None:
        """The imitation as the module runs it: a resumed run is past it (disabled), but keeps its ``suite``, which
        names the clusters PPO steps and the sizes the policy acts for; without a suite a resumed run has none."""
        if self.ckpt_path is None:
            return self.imitation
        return replace(self.imitation, enabled=False) if self.imitation.suite else None

    def recorded(self) -> dict:
        """``hyper_parameters`` of the policy checkpoint: the recipe's sections as plain values."""
        im = self.module_imitation()
        return {
            "net": recorded_net(self.net),
            "ppo": asdict(self.ppo),
            "rollout": asdict(self.rollout),
            "sim": self.sim.recorded(),
            "workload": _plain(asdict(self.workload)),
            "reward": self.reward,
            "predictor": self.predictor,
            "bank_path": self.bank_path,
            "seed": self.seed,
            "total_env_steps": self.total_env_steps,
            "num_threads": self.num_threads,
            "imitation": None if im is None else im.recorded(),
            "init_from": None if self.ckpt_path else self.init_from,
        }

    def logged(self) -> dict:
        """The run's hyper-parameters for TensorBoard: the checkpoint's record, the validation and the trainer."""
        return {
            **self.recorded(),
            "validation": _plain(asdict(self.validation)),
            "trainer": asdict(self.trainer),
            "run_name": self.run_name,
        }


def recorded_net(net: dict) -> dict:
    """``mat.net`` as a policy checkpoint records it: configs without a ``decoder`` are the paper's (autoregressive)."""
    return {"decoder": "autoregressive", **net}


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def validation_load(settings: MatSettings) -> float:
    """The load the validation episodes use: ``validation.load`` if set, else the training load (with mixed-load
    training, the highest of its loads)."""
    if settings.validation.load is not None:
        return float(settings.validation.load)
    load = settings.workload.load
    return float(load) if isinstance(load, (int, float)) else max(float(x) for x in load)


def scaled_loads(load, n_nodes: int) -> list[float]:
    """The workload's load(s) at the same pressure per node on ``n_nodes`` nodes (``load × M / 7``, at most 1)."""
    loads = [load] if isinstance(load, (int, float)) else list(load)
    return [min(float(p) * n_nodes / PAPER_NODES, 1.0) for p in loads]


def setting_sim(sim: SimSettings, setting: SuiteSetting) -> SimSettings:
    """The training cluster ``sim`` with a suite setting's nodes, slots, node speeds and switch cost in its place."""
    return replace(
        sim,
        nodes=setting.n_nodes,
        max_active=setting.max_active,
        node_speed=setting.node_speed,
        switch_cost=setting.switch_cost,
    )
