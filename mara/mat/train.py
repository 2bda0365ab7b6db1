"""Stage II (§4.4): train the MAT allocator with PPO against a frozen predictor. ``train_policy(cfg) -> dict``."""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger
from omegaconf import DictConfig, OmegaConf

from mara.core import registry
from mara.core.config import ConfigError, conf_dir, load_method_cfg, plain_config
from mara.core.progress_callback import ProgressCallback
from mara.core.runlog import log_hparams, setup_logging
from mara.core.safe_load import CheckpointError
from mara.mat.allocator import read_policy_checkpoint
from mara.mat.callback import ValidationCallback
from mara.mat.module import MATModule, recorded_net
from mara.mat.suite import scaled_loads, setting_sim, suite_settings
from mara.predictors.factory import predictor_config, trained_predictor_mismatch
from mara.sim.env import check_node_options

CONF_DIR = conf_dir()


def resolve_config(cfg: DictConfig) -> dict:
    """The MAT settings as a plain dict: ``cfg.mat`` (conf/mat/default.yaml), with the pipeline's shared keys
    (``seed``, ``reward``, ``ckpt_path``, ``predictor``, ``paths.output_dir``, ``sim`` (incl. ``node_speed`` /
    ``switch_cost``), ``bank.path``,
    ``trainer.accelerator/devices/strategy``) taking precedence when ``cfg`` is the full ``conf/train.yaml``.
    A bare ``conf/mat/default.yaml`` is accepted too."""
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
        for ours, theirs in (("n_nodes", "nodes"), ("max_active", "max_active"), ("n_steps", "steps"),
                             ("obs_every", "obs_every"), ("beta", "beta")):
            if cfg.sim.get(theirs) is not None:
                c["sim"][ours] = cfg.sim[theirs]
        # node speeds and switch costs reach the training, imitation and validation envs (and the checkpoint's
        # hparams); recorded only when set, so identical-node runs keep their hparams
        speed = cfg.sim.get("node_speed")
        speed, cost = check_node_options(OmegaConf.to_container(speed) if OmegaConf.is_config(speed) else speed,
                                         cfg.sim.get("switch_cost") or 0, int(c["sim"]["n_nodes"]), int(c["sim"]["obs_every"]))
        if speed is not None:
            c["sim"]["node_speed"] = [int(x) for x in speed]
        if cost:
            c["sim"]["switch_cost"] = int(cost)
    if cfg.get("trainer") is not None:
        for key in ("accelerator", "devices", "strategy"):
            if cfg.trainer.get(key) is not None:
                c["trainer"][key] = cfg.trainer[key]
    return c


def load_recipe(name: str) -> DictConfig:
    """A bare conf/mat/<name>.yaml laid over the recipes its ``defaults`` list names (default → band → clone), as
    Hydra composes it under ``mat=<name>``."""
    cfg = OmegaConf.load(registry.find_conf("mat", f"{name}.yaml") or CONF_DIR / "mat" / f"{name}.yaml")
    base = OmegaConf.create()
    for entry in cfg.pop("defaults", []) or []:
        if entry != "_self_":
            base = OmegaConf.merge(base, load_recipe(str(entry)))
    return OmegaConf.merge(base, cfg)


def check_teacher_predictor(c: dict) -> None:
    """The imitation teacher reads MAT's own frozen predictor (by design: MARA-WLS imitates the slack rule on WLS
    estimates). That is sound for rules defined on any predictor's median and band (Slack-FM, Slack-FM-q), not for
    the decision head's rules, which read levels only the head was trained at (Slack-QR-q's 0.05 level, Slack-QR's
    band): fed another predictor they would silently become another rule. So a teacher whose predictor is the head
    (``qr`` kind) must be given that very predictor — or, for a rule that judges at the median (no ``quantile``:
    Slack-QR, Slack-QR-displace), the same head with the same median and upper end, the only levels it reads.
    One-line ConfigError otherwise. The privileged ``truth`` teacher (Slack-Truth) reads the simulator and is always
    allowed. Every teacher of ``mat.imitation.suite`` is checked."""
    imitation = c.get("imitation") or {}
    if not imitation.get("enabled") or not imitation.get("teacher") or c.get("ckpt_path"):
        return
    teachers = [str(imitation["teacher"])] + [str(s["teacher"]) for s in imitation.get("suite") or [] if s.get("teacher")]
    pred = c.get("predictor")
    given = predictor_config(pred) if isinstance(pred, str) else pred
    for teacher in dict.fromkeys(teachers):
        mcfg = load_method_cfg(teacher)
        wants = mcfg.get("predictor")
        if wants in (None, "truth") or predictor_config(wants).get("name") != "qr":
            continue
        why = trained_predictor_mismatch(given, wants)
        if why and given is not None and (mcfg.get("allocator") or {}).get("quantile") is None:
            why = None if reads_same_median_and_upper(given, predictor_config(wants)) else why
        if why or pred is None:
            have = pred if isinstance(pred, str) or pred is None else pred.get("name")
            raise ConfigError(f"mat.imitation.teacher={teacher} reads predictor {wants!r} but this policy is trained "
                              f"with {have!r}: give the same predictor (e.g. `mat=default predictor=qr_q`) or a teacher "
                              f"made for {have!r}")


def reads_same_median_and_upper(a: dict, b: dict) -> bool:
    """Two predictor configs of one kind and checkpoint whose bands share the median and the upper end."""
    band_a, band_b = (list(plain_config(x.get("band")) or []) for x in (a, b))
    return (a.get("name") == b.get("name") and a.get("ckpt_path") == b.get("ckpt_path") and len(band_a) == len(band_b) == 3
            and band_a[1:] == band_b[1:])


def check_resume_checkpoint(path) -> None:
    """Before any work: ``ckpt_path`` (resume) is a MAT training checkpoint loadable as data, with its training state
    in the current form; else one ``CheckpointError`` line naming the file and what it is not."""
    ckpt = read_policy_checkpoint(path)
    state = ckpt.get("mat_state")
    if state is None or "optimizer_states" not in ckpt or "loops" not in ckpt:
        raise CheckpointError(f"{path} is not a MAT training checkpoint to resume (no training state: a policy for "
                              f"evaluation only; resume from the run's checkpoints/last.ckpt)")
    if "blob" in (state.get("env") or {}):
        raise CheckpointError(f"{path} holds its MAT training state as pickled bytes, refused unread: "
                              f"convert it with python -m mara.ckpt_convert {path}")


def validation_load(c: dict) -> float:
    """The load the validation episodes use: ``validation.load`` if set, else the training load (with mixed-load
    training, a list, the highest of its loads)."""
    v = (c.get("validation") or {}).get("load")
    if v is not None:
        return float(v)
    wl = c["workload"]["load"]
    return float(wl) if isinstance(wl, (int, float)) else max(float(x) for x in wl)


def validation_settings(c: dict) -> list[dict] | None:
    """``mat.validation.suite: true``: every setting of ``mat.imitation.suite`` as ``{sim, load}`` (the validation
    load at the same pressure per node, ``scaled_loads``) for the validation callback; else None (the training
    cluster). ``mat.rollout.suite`` or ``mat.validation.suite`` without a suite is one ConfigError line."""
    suite = (c.get("imitation") or {}).get("suite")
    for key in ("rollout", "validation"):
        if (c.get(key) or {}).get("suite") and not suite:
            raise ConfigError(f"mat.{key}.suite=true needs the settings of mat.imitation.suite (recipe mat=suite_ppo)")
    if not (c.get("validation") or {}).get("suite"):
        return None
    return [{"sim": (sim := setting_sim(c["sim"], s)), "load": scaled_loads(validation_load(c), sim["n_nodes"])[0]}
            for s in suite_settings(c["imitation"], "")]


def resumed_imitation(c: dict) -> dict | None:
    """``mat.imitation`` as the module gets it: a resumed run is past the imitation (``enabled: false``), but keeps
    its ``suite``, which names the clusters PPO steps (``mat.rollout.suite``) and the sizes the policy acts for."""
    im = c.get("imitation")
    if c.get("ckpt_path") is None or not im:
        return im
    return {**im, "enabled": False} if im.get("suite") else None


def check_init_from(c: dict) -> None:
    """Before any work: ``mat.init_from`` (PPO from a trained policy's weights instead of the imitation) is a policy
    checkpoint of the same network (``mat.net``) and token scale as this recipe; else one ``CheckpointError`` line."""
    path = c.get("init_from")
    if not path or c.get("ckpt_path"):
        return
    if not Path(path).exists():
        raise CheckpointError(f"mat.init_from={path}: no such policy checkpoint")
    hp = read_policy_checkpoint(path, mmap=True)["hyper_parameters"]  # the weights are loaded once, by the module
    net = recorded_net(c["net"])
    if hp.get("net") != net or hp["rollout"]["scale"] != c["rollout"]["scale"]:
        diff = sorted(k for k in set(net) | set(hp.get("net") or {}) if net.get(k) != (hp.get("net") or {}).get(k))
        raise CheckpointError(f"mat.init_from={path} is a policy of another network (mat.net differs in "
                              f"{diff or ['rollout.scale']}): start from a policy of this recipe")


def train_policy(cfg: DictConfig, callbacks: list | None = None) -> dict:
    """Train per ``cfg.mat`` (conf/mat/default.yaml); returns the best checkpoint path and validation metrics."""

    setup_logging()
    c = resolve_config(cfg)
    if c.get("ckpt_path"):
        check_resume_checkpoint(c["ckpt_path"])
    check_teacher_predictor(c)
    check_init_from(c)
    val_settings = validation_settings(c)
    pred = c["predictor"]
    pred_name = pred if isinstance(pred, str) or pred is None else pred.get("name")
    out = Path(c["output_dir"] or f"outputs/mat/{pred_name}_{c['reward']}_seed{c['seed']}_{time.strftime('%Y-%m-%d_%H-%M-%S')}")
    if c["workload"]["train_root"] + c["seed"] in set(range(5)) | set(c["validation"]["roots"]):
        raise ValueError("mat.workload.train_root + seed must differ from the evaluation (0–4) and validation roots")
    L.seed_everything(c["seed"], workers=True, verbose=False)
    module = MATModule(net=c["net"], ppo=c["ppo"], rollout=c["rollout"], sim=c["sim"], workload=c["workload"],
                       reward=c["reward"], predictor={"name": pred} if isinstance(pred, str) else pred,
                       bank_path=c["bank_path"], seed=c["seed"], total_env_steps=c["total_env_steps"],
                       num_threads=c["num_threads"],
                       imitation=resumed_imitation(c),
                       init_from=None if c.get("ckpt_path") else c.get("init_from"))  # a resumed run has its weights
    tr = c["trainer"]
    world = tr["devices"] if isinstance(tr["devices"], int) else 1
    per_iter = world * c["rollout"]["n_episodes"] * c["rollout"]["n_steps"]
    max_iters = 2 * math.ceil(c["total_env_steps"] / per_iter) + 1  # stops earlier on the env-step count
    val = c["validation"]
    val_cb = ValidationCallback(out / "checkpoints", val["roots"], val["n_episodes"], val["every_n_iterations"], c["sim"],
                                c["rollout"]["scale"], val["baselines"], c["workload"]["task_set"], validation_load(c),
                                at_start=val.get("at_start", False), settings=val_settings)
    # the state after every PPO iteration (weights, optimiser, rollout and validation state): a killed run resumes there
    last_cb = ModelCheckpoint(dirpath=out / "checkpoints", filename="last", save_top_k=1, every_n_epochs=1, enable_version_counter=False)
    what = c.get("run_name") or f"policy ({pred_name}, {c['reward']}, seed {c['seed']})"
    prog_cb = ProgressCallback(what, total_env_steps=int(c["total_env_steps"]))
    trainer = L.Trainer(
        accelerator=tr["accelerator"], devices=tr["devices"], strategy=tr["strategy"], deterministic=tr["deterministic"],
        max_epochs=max_iters, callbacks=[val_cb, last_cb, prog_cb, *(callbacks or [])], logger=TensorBoardLogger(str(out), name="tb", version=""),
        use_distributed_sampler=False, enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
        num_sanity_val_steps=0, default_root_dir=str(out),
    )
    t0 = time.time()
    trainer.fit(module, ckpt_path=c["ckpt_path"], weights_only=True)  # a resumed file is read as data, never run
    written = out / "checkpoints" / "validation.json"  # by rank 0; the only copy in the parent process under ddp_spawn
    summary = json.loads(written.read_text()) if written.exists() else val_cb.summary()
    if getattr(module, "imitation_report", None):
        summary["imitation"] = module.imitation_report
        (out / "checkpoints" / "imitation.json").write_text(json.dumps(module.imitation_report, indent=1))
    summary.update(train_seconds=time.time() - t0, output_dir=str(out), last_ckpt=str(out / "checkpoints" / "last.ckpt"),
                   env_steps=int(trainer.callback_metrics.get("env_steps", float("nan"))) if "env_steps" in trainer.callback_metrics else None)
    if trainer.is_global_zero:
        final = {k: summary.get(k) for k in ("val_success_rate", "best_iteration", "train_seconds", "env_steps")}
        final.update({f"val_{k}": v for k, v in (summary.get("val_baselines") or {}).items()})
        log_hparams(out / "tb", {k: v for k, v in c.items() if k not in ("output_dir", "ckpt_path")}, final)
    return summary


def policy_method(reward: str, predictor_name: str | None, recipe: dict) -> str:
    """The name of a policy trained with this reward, predictor and MAT recipe (``mat``; a policy checkpoint's
    hyper-parameters hold the same keys): the learned method whose ``trained_as`` matches (conf/method YAMLs,
    mara/core/registry.py)."""
    return registry.trained_method({**plain_config(dict(recipe or {})), "reward": reward, "predictor": predictor_name})


def trained_method(cfg: DictConfig) -> str:
    """The paper name of the policy this run trains."""
    mat = cfg.get("mat") or {}
    return policy_method(cfg.get("reward", "dense"), cfg.predictor.get("name"), mat)


def checkpoint_method(path) -> str:
    """The paper name of the policy a checkpoint holds, from what it recorded of its training (not from the config
    that evaluates it: ``stage=evaluate +policy_ckpt=...`` names a MARA-QR checkpoint MARA-QR under any recipe)."""
    hp = read_policy_checkpoint(path, mmap=True)["hyper_parameters"]  # what it records, not its weights
    return policy_method(hp.get("reward", "dense"), (hp.get("predictor") or {}).get("name"), hp)


def with_run_policy(listed: list[str], trained: str) -> list[str]:
    """The methods a run evaluates, its own policy (named ``trained``) among them wherever the list asks for a learned
    one: in MARA's place (mat=paper trains MARA-paper), or before the other policies the list names (experiment=hetero
    lists the shipped ones; experiment=hetero mat=hetero trains MARA-QR). A list without policies stays as it is."""
    learned = [m for m in listed if registry.method(m).learned]
    if not learned or trained in listed:
        return list(listed)
    at = listed.index("MARA") if "MARA" in listed else listed.index(learned[0])
    return listed[:at] + [trained] + listed[at + ("MARA" in listed):]
