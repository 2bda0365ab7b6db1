"""Stage II (§4.4): train the MAT allocator with PPO against a frozen predictor. ``train_policy(settings) -> dict``,
``settings`` a ``MatSettings`` (mara/mat/settings.py) parsed once by the entry point (mara/train_settings.py)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import TensorBoardLogger

from mara.core import registry
from mara.core.progress_callback import ProgressCallback
from mara.core.runlog import log_hparams, setup_logging
from mara.core.safe_load import CheckpointError
from mara.mat.allocator import read_policy_checkpoint
from mara.mat.callback import ValidationCallback
from mara.mat.module import MATModule
from mara.mat.settings import (
    MatSettings,
    ValidationSetting,
    recorded_net,
    scaled_loads,
    setting_sim,
    validation_load,
)
from mara.mat.suite import suite_settings


def check_resume_checkpoint(path) -> None:
    """Before any work: ``ckpt_path`` (resume) is a MAT training checkpoint loadable as data, with its training state
    in the current form; else one ``CheckpointError`` line naming the file and what it is not."""
    ckpt = read_policy_checkpoint(path)
    state = ckpt.get("mat_state")
    if state is None or "optimizer_states" not in ckpt or "loops" not in ckpt:
        raise CheckpointError(
            f"{path} is not a MAT training checkpoint to resume (no training state: a policy for "
            f"evaluation only; resume from the run's checkpoints/last.ckpt)"
        )
    if "blob" in (state.get("env") or {}):
        raise CheckpointError(
            f"{path} holds its MAT training state as pickled bytes, refused unread: "
            f"convert it with python -m mara.ckpt_convert {path}"
        )


def validation_settings(settings: MatSettings) -> list[ValidationSetting] | None:
    """``mat.validation.suite: true``: every cluster of ``mat.imitation.suite`` at the validation load at the same
    pressure per node (``scaled_loads``), for the validation callback; else None (the training cluster)."""
    if not settings.validation.suite:
        return None
    load = validation_load(settings)
    return [
        ValidationSetting(sim := setting_sim(settings.sim, s), scaled_loads(load, sim.nodes)[0])
        for s in suite_settings(settings.imitation, "")
    ]


def check_init_from(settings: MatSettings) -> None:
    """Before any work: ``mat.init_from`` (PPO from a trained policy's weights instead of the imitation) is a policy
    checkpoint of the same network (``mat.net``) and token scale as this recipe; else one ``CheckpointError`` line."""
    path = settings.init_from
    if not path or settings.ckpt_path:
        return
    if not Path(path).exists():
        raise CheckpointError(f"mat.init_from={path}: no such policy checkpoint")
    recorded = read_policy_checkpoint(path, mmap=True)["hyper_parameters"]  # the weights are loaded once, by the module
    net, theirs = recorded_net(settings.net), recorded.get("net") or {}
    if theirs != net or recorded["rollout"]["scale"] != settings.rollout.scale:
        diff = sorted(k for k in set(net) | set(theirs) if net.get(k) != theirs.get(k))
        raise CheckpointError(
            f"mat.init_from={path} is a policy of another network (mat.net differs in "
            f"{diff or ['rollout.scale']}): start from a policy of this recipe"
        )


def check_policy_files(settings: MatSettings) -> None:
    """Before any work: the checkpoint a training resumes from and the policy it starts from (``init_from``) are
    what they claim to be, read as data (one ``CheckpointError`` line otherwise)."""
    if settings.ckpt_path:
        check_resume_checkpoint(settings.ckpt_path)
    check_init_from(settings)


def train_policy(settings: MatSettings, callbacks: list | None = None) -> dict:
    """Train the MAT policy of ``settings``; returns the best checkpoint path and validation metrics."""

    setup_logging()
    check_policy_files(settings)  # again here: a resumed stage finds its checkpoint only when it starts
    st = settings
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    out = Path(st.output_dir or f"outputs/mat/{st.predictor_name}_{st.reward}_seed{st.seed}_{stamp}")
    L.seed_everything(st.seed, workers=True, verbose=False)
    module = MATModule(st)
    tr = st.trainer
    per_iter = tr.world * st.rollout.n_episodes * st.rollout.n_steps
    max_iters = 2 * math.ceil(st.total_env_steps / per_iter) + 1  # stops earlier on the env-step count
    val = st.validation
    val_cb = ValidationCallback(
        out / "checkpoints",
        val.roots,
        val.n_episodes,
        val.every_n_iterations,
        st.sim,
        st.rollout.scale,
        val.baselines,
        st.workload.task_set,
        validation_load(st),
        at_start=val.at_start,
        settings=validation_settings(st),
    )
    # the state after every PPO iteration (weights, optimiser, rollout and validation state): a killed run resumes there
    last_cb = ModelCheckpoint(
        dirpath=out / "checkpoints", filename="last", save_top_k=1, every_n_epochs=1, enable_version_counter=False
    )
    what = st.run_name or f"policy ({st.predictor_name}, {st.reward}, seed {st.seed})"
    prog_cb = ProgressCallback(what, total_env_steps=int(st.total_env_steps))
    trainer = L.Trainer(
        accelerator=tr.accelerator,
        devices=tr.devices,
        strategy=tr.strategy,
        deterministic=tr.deterministic,
        max_epochs=max_iters,
        callbacks=[val_cb, last_cb, prog_cb, *(callbacks or [])],
        logger=TensorBoardLogger(str(out), name="tb", version=""),
        use_distributed_sampler=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        log_every_n_steps=1,
        num_sanity_val_steps=0,
        default_root_dir=str(out),
    )
    t0 = time.time()
    trainer.fit(module, ckpt_path=st.ckpt_path, weights_only=True)  # a resumed file is read as data, never run
    written = out / "checkpoints" / "validation.json"  # by rank 0; the only copy in the parent process under ddp_spawn
    summary = json.loads(written.read_text()) if written.exists() else val_cb.summary()
    if getattr(module, "imitation_report", None):
        summary["imitation"] = module.imitation_report
        (out / "checkpoints" / "imitation.json").write_text(json.dumps(module.imitation_report, indent=1))
    summary.update(
        train_seconds=time.time() - t0,
        output_dir=str(out),
        last_ckpt=str(out / "checkpoints" / "last.ckpt"),
        env_steps=int(trainer.callback_metrics.get("env_steps", float("nan")))
        if "env_steps" in trainer.callback_metrics
        else None,
    )
    if trainer.is_global_zero:
        final = {k: summary.get(k) for k in ("val_success_rate", "best_iteration", "train_seconds", "env_steps")}
        final.update({f"val_{k}": v for k, v in (summary.get("val_baselines") or {}).items()})
        log_hparams(out / "tb", st.logged(), final)
    return summary


def policy_method(reward: str, predictor_name: str | None, recipe: dict) -> str:
    """The name of a policy trained with this reward, predictor and MAT recipe (``mat``; a policy checkpoint's
    hyper-parameters hold the same keys): the learned method whose ``trained_as`` matches (conf/method YAMLs,
    mara/core/registry.py)."""
    return registry.trained_method({**dict(recipe or {}), "reward": reward, "predictor": predictor_name})


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
    return listed[:at] + [trained] + listed[at + ("MARA" in listed) :]
