"""A MAT recipe (conf/mat) read into checked ``MatSettings``: the policy stage's settings.

``load_recipe`` composes a bare recipe as Hydra would under ``mat=<name>``; ``mat_settings`` parses it (or the full
conf/train.yaml, whose shared keys are laid over the recipe) and checks the recipe's own consistency and its
imitation teacher's predictor (one ``ConfigError`` line).
"""

from __future__ import annotations

from dataclasses import fields

from omegaconf import DictConfig, OmegaConf

from mara.core import registry
from mara.core.config import ConfigError, conf_dir, load_method_cfg, plain_config
from mara.mat.settings import (
    ImitationSettings,
    MatSettings,
    PPOSettings,
    RolloutSettings,
    SuiteEntry,
    TrainerSettings,
    ValidationSettings,
    WorkloadSettings,
)
from mara.predictors.factory import predictor_config, trained_predictor_mismatch
from mara.sim.nodes import check_node_options
from mara.sim.settings import SimSettings

EVAL_ROOTS = set(range(5))


def load_recipe(name: str) -> DictConfig:
    """A bare conf/mat/<name>.yaml (or conf/experiments/mat/, or a ``MARA_CONF_PATH`` folder's: Hydra's search
    path) laid over the recipes its ``defaults`` list names (default → band → clone), as Hydra composes it under
    ``mat=<name>``."""
    cfg = OmegaConf.load(registry.find_conf("mat", f"{name}.yaml") or conf_dir("mat", f"{name}.yaml"))
    base = OmegaConf.create()
    for entry in cfg.pop("defaults", []) or []:
        if entry != "_self_":
            base = OmegaConf.merge(base, load_recipe(str(entry)))
    return OmegaConf.merge(base, cfg)


def merged_recipe(cfg: DictConfig) -> dict:
    """The MAT recipe as a plain dict: ``cfg.mat`` with the pipeline's shared keys (``seed``, ``reward``,
    ``ckpt_path``, ``predictor``, ``paths.output_dir``, ``sim``, ``bank.path``, ``trainer.accelerator/devices/
    strategy``) laid over it when ``cfg`` is the full conf/train.yaml; a bare conf/mat recipe as it is."""
    if "mat" not in cfg:
        return OmegaConf.to_container(cfg, resolve=True)
    c = OmegaConf.to_container(cfg.mat, resolve=True)
    for key in ("seed", "reward", "ckpt_path"):
        if cfg.get(key) is not None:
            c[key] = cfg[key]
    if cfg.get("predictor") is not None:
        c["predictor"] = OmegaConf.to_container(cfg.predictor, resolve=True)
    if cfg.get("paths") is not None and cfg.paths.get("output_dir"):
        c["output_dir"] = cfg.paths.output_dir
    if cfg.get("bank") is not None and cfg.bank.get("path"):
        c["bank_path"] = cfg.bank.path
    if cfg.get("sim") is not None:
        for ours, theirs in (
            ("n_nodes", "nodes"),
            ("max_active", "max_active"),
            ("n_steps", "steps"),
            ("obs_every", "obs_every"),
            ("beta", "beta"),
        ):
            if cfg.sim.get(theirs) is not None:
                c["sim"][ours] = cfg.sim[theirs]
        speed, cost = plain_config(cfg.sim.get("node_speed")), cfg.sim.get("switch_cost") or 0
        c["sim"]["node_speed"], c["sim"]["switch_cost"] = speed, cost
    if cfg.get("trainer") is not None:
        for key in ("accelerator", "devices", "strategy"):
            if cfg.trainer.get(key) is not None:
                c["trainer"][key] = cfg.trainer[key]
    return c


def _section(cls, where: str, given):
    """``cls(**given)``, or one ConfigError line naming the keys ``cls`` does not have."""
    given = dict(given or {})
    unknown = sorted(set(given) - {f.name for f in fields(cls)})
    if unknown:
        raise ConfigError(f"{where}: unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}")
    return cls(**given)


def _suite_entry(i: int, s) -> SuiteEntry:
    """One ``mat.imitation.suite`` entry, checked (one ConfigError line)."""
    s = dict(s)
    unknown = set(s) - {"nodes", "max_active", "node_speed", "switch_cost", "teacher"}
    if unknown or "nodes" not in s or "max_active" not in s:
        raise ConfigError(
            f"mat.imitation.suite[{i}] needs nodes and max_active (and optionally node_speed, "
            f"switch_cost, teacher); got keys {sorted(s)}"
        )
    m, k = int(s["nodes"]), int(s["max_active"])
    if m < 1 or k < 1:
        raise ConfigError(f"mat.imitation.suite[{i}]: nodes and max_active must be >= 1, got {m}, {k}")
    speed = s.get("node_speed")
    if speed is not None and len(speed) != m:
        raise ConfigError(f"mat.imitation.suite[{i}]: node_speed has {len(speed)} entries for {m} nodes")
    cost = s.get("switch_cost")
    return SuiteEntry(
        m,
        k,
        None if speed is None else tuple(int(x) for x in speed),
        None if cost is None else int(cost),
        None if s.get("teacher") is None else str(s["teacher"]),
    )


def mat_settings(cfg: DictConfig) -> MatSettings:
    """The typed, checked settings of the policy stage (full conf/train.yaml or a bare conf/mat recipe)."""
    c = merged_recipe(cfg)
    sim = c.get("sim") or {}
    try:
        speed, cost = check_node_options(
            sim.get("node_speed"), sim.get("switch_cost") or 0, int(sim["n_nodes"]), int(sim["obs_every"])
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    sim_settings = SimSettings(
        nodes=int(sim["n_nodes"]),
        max_active=int(sim["max_active"]),
        steps=int(sim["n_steps"]),
        obs_every=int(sim["obs_every"]),
        beta=sim["beta"],
        node_speed=None if speed is None else tuple(int(x) for x in speed),
        switch_cost=int(cost),
    )
    im = dict(c.get("imitation") or {})
    im["suite"] = tuple(_suite_entry(i, s) for i, s in enumerate(im.get("suite") or []))
    wl = dict(c["workload"])
    if not isinstance(wl.get("load", 0.04), (int, float)):
        wl["load"] = tuple(wl["load"])
    val = dict(c["validation"])
    val["roots"] = tuple(val["roots"])
    pred = c.get("predictor")
    settings = MatSettings(
        net=dict(c["net"]),
        sim=sim_settings,
        ppo=_section(PPOSettings, "mat.ppo", c["ppo"]),
        rollout=_section(RolloutSettings, "mat.rollout", c["rollout"]),
        workload=_section(WorkloadSettings, "mat.workload", wl),
        validation=_section(ValidationSettings, "mat.validation", val),
        imitation=_section(ImitationSettings, "mat.imitation", im),
        trainer=_section(TrainerSettings, "mat.trainer", c["trainer"]),
        reward=c.get("reward", "dense"),
        predictor={"name": pred} if isinstance(pred, str) else pred,
        bank_path=c.get("bank_path"),
        seed=int(c.get("seed", 0)),
        total_env_steps=c["total_env_steps"],
        num_threads=c.get("num_threads", 1),
        init_from=c.get("init_from"),
        ckpt_path=c.get("ckpt_path"),
        output_dir=c.get("output_dir"),
        run_name=c.get("run_name"),
    )
    check_recipe(settings)
    return settings


def check_recipe(settings: MatSettings) -> None:
    """The recipe's own consistency: a suite for ``rollout.suite`` / ``validation.suite``, training roots apart from
    the evaluation and validation roots (one ConfigError line)."""
    for key in ("rollout", "validation"):
        if getattr(settings, key).suite and not settings.imitation.suite:
            raise ConfigError(f"mat.{key}.suite=true needs the settings of mat.imitation.suite (recipe mat=suite_ppo)")
    if settings.workload.train_root + settings.seed in EVAL_ROOTS | set(settings.validation.roots):
        raise ConfigError("mat.workload.train_root + seed must differ from the evaluation (0–4) and validation roots")


def check_teacher_predictor(settings: MatSettings) -> None:
    """The imitation teacher reads MAT's own frozen predictor (by design: MARA-WLS imitates the slack rule on WLS
    estimates). That is sound for rules defined on any predictor's median and band (Slack-FM, Slack-FM-q), not for
    the decision head's rules, which read levels only the head was trained at (Slack-QR-q's 0.05 level, Slack-QR's
    band): fed another predictor they would silently become another rule. So a teacher whose predictor is the head
    (``qr`` kind) must be given that very predictor — or, for a rule that judges at the median (no ``quantile``:
    Slack-QR, Slack-QR-displace), the same head with the same median and upper end, the only levels it reads.
    One-line ConfigError otherwise. The privileged ``truth`` teacher (Slack-Truth) reads the simulator and is always
    allowed. Every teacher of ``mat.imitation.suite`` is checked."""
    im = settings.imitation
    if not im.enabled or not im.teacher or settings.ckpt_path:
        return
    teachers = [str(im.teacher)] + [s.teacher for s in im.suite if s.teacher]
    pred = settings.predictor
    bare = pred is not None and set(pred) == {"name"}  # a bare recipe names its predictor: the group's file
    given = predictor_config(pred["name"]) if bare else pred
    for teacher in dict.fromkeys(teachers):
        mcfg = load_method_cfg(teacher)
        wants = mcfg.get("predictor")
        if wants in (None, "truth") or predictor_config(wants).get("name") != "qr":
            continue
        why = trained_predictor_mismatch(given, wants)
        if why and given is not None and (mcfg.get("allocator") or {}).get("quantile") is None:
            why = None if reads_same_median_and_upper(given, predictor_config(wants)) else why
        if why or pred is None:
            have = None if pred is None else pred["name"]
            raise ConfigError(
                f"mat.imitation.teacher={teacher} reads predictor {wants!r} but this policy is "
                f"trained with {have!r}: give the same predictor (e.g. `mat=default predictor=qr_q`) "
                f"or a teacher made for {have!r}"
            )


def reads_same_median_and_upper(a, b) -> bool:
    """Two predictor configs of one kind and checkpoint whose bands share the median and the upper end."""
    band_a, band_b = (list(plain_config(x.get("band")) or []) for x in (a, b))
    return (
        a.get("name") == b.get("name")
        and a.get("ckpt_path") == b.get("ckpt_path")
        and len(band_a) == len(band_b) == 3
        and band_a[1:] == band_b[1:]
    )
