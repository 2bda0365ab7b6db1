"""Every checkpoint a run will read, loaded as data with its own loader before any work: policies (and whether they
fit the run), predictor checkpoints, the files a training stage resumes or starts from, calibration banks."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mara.core.config import ConfigError, is_learned, load_method_cfg, plain_config
from mara.core.registry import import_object, predictor_entry, predictor_kinds
from mara.eval.policy_fit import check_policy_fit, policy_facts
from mara.mat.allocator import read_policy_checkpoint
from mara.mat.train import check_init_from, check_resume_checkpoint
from mara.predictors.prefix import cal_bank_path
from mara.preflight.common import _bank_path, _first_line, _named
from mara.train_settings import mat_settings


def _loaders() -> list[tuple[str, str]]:
    """(what a checkpoint is in words, its loader) for the policy and every registered predictor checkpoint."""
    seen = {"a MAT policy checkpoint": "mara.mat.allocator.read_policy_checkpoint"}
    for name in predictor_kinds():
        e = predictor_entry(name)
        if e.checkpoint_loader:
            seen.setdefault(e.checkpoint_holds or f"a {name} checkpoint", e.checkpoint_loader)
    return list(seen.items())


def _kind_of(path) -> str | None:
    """What a checkpoint file is, read with the packages' own loaders (for the error that names a mixed-up file)."""
    for kind, loader in _loaders():
        try:
            import_object(loader)(path)
            return kind
        except Exception:
            continue
    return None


def read_policy(path) -> dict:
    """A policy checkpoint's contents with its path (``path`` key), or a one-line ConfigError: missing, unreadable,
    or another kind of checkpoint."""
    if not path or not Path(str(path)).is_file():
        raise ConfigError(f"policy checkpoint {path} not found")
    try:
        ckpt = read_policy_checkpoint(str(path))
        policy_facts(ckpt)  # the hyper-parameters every later step reads are there
    except Exception as exc:  # the loader's one-line reason (ValueError or ConfigError), and what the file is instead
        kind = _kind_of(path)
        hint = f" (it is {kind})" if kind and "policy" not in kind else ""
        msg = _first_line(exc)
        raise ConfigError(f"{msg}{hint}" if str(path) in msg else f"policy checkpoint {path}: {msg}{hint}") from None
    return dict(ckpt, path=str(path))


SHIPPED_CKPT_NAMES = {"lcpfn": ("prior", "finetuned")}  # ckpt_path values that name a shipped checkpoint, not a file


def read_predictor_checkpoint(spec, where: str) -> None:
    """A predictor config's explicit ``ckpt_path`` loads with that predictor's own loader (``registry.checkpoint``
    of its kind): one-line ConfigError."""
    path = spec.get("ckpt_path") if spec is not None and hasattr(spec, "get") else None
    entry = predictor_entry(str(spec.get("name")), missing_ok=True) if path else None
    if not path or entry is None or not entry.checkpoint_loader or str(path) in SHIPPED_CKPT_NAMES.get(entry.name, ()):
        return
    if not Path(str(path)).is_file():
        raise ConfigError(f"{where}.ckpt_path: predictor checkpoint {path} not found")
    kind = entry.checkpoint_holds or f"a {entry.name} checkpoint"
    try:
        import_object(entry.checkpoint_loader)(str(path))
    except Exception as exc:
        other = _kind_of(path)
        why = f"it is {other}" if other else (_first_line(exc) if isinstance(exc, ConfigError) else type(exc).__name__)
        raise ConfigError(f"{where}.ckpt_path: {path} is not {kind} ({why})") from None


def method_checkpoints(mcfg: DictConfig) -> list[str]:
    """The policy checkpoint paths a method config names (``ckpt_path`` or ``checkpoints``)."""
    ckpts = mcfg.get("checkpoints")
    if ckpts:
        return [str(c.get("ckpt_path")) for c in ckpts]
    return [str(mcfg.ckpt_path)] if mcfg.get("ckpt_path") else []


def check_checkpoints(cfg: DictConfig, methods: list[str], policy_defaults: dict) -> None:
    """Every policy a learned method will run (given, or the default ``policy_defaults[method]``) loads and fits the
    run; every predictor checkpoint named by the run's predictor or a method's predictor loads."""
    overrides = plain_config(cfg.get("method_overrides")) or {}
    predictors = cfg.get("predictors") or {}
    if cfg.get("predictor") is not None:
        read_predictor_checkpoint(cfg.predictor, "predictor")
    for m in methods:
        mcfg = load_method_cfg(m, overrides.get(m))
        pred = mcfg.get("predictor")
        if pred is not None and pred in predictors:
            read_predictor_checkpoint(predictors[pred], f"predictors.{pred}")
        if not is_learned(mcfg):
            continue
        given = method_checkpoints(mcfg)
        if given or m not in policy_defaults:
            check_policy_fit(mcfg, [read_policy(p) for p in given], cfg.get("sim"))
        else:
            default_mcfg, paths = policy_defaults[m]
            check_policy_fit(default_mcfg or mcfg, [read_policy(p) for p in paths], cfg.get("sim"))


def check_stage_inputs(cfg: DictConfig) -> None:
    """The files a training stage reads, whichever stages run (``stage=policy`` as much as ``stage=all``): the run's
    predictor checkpoint, and for the policy stage the checkpoint it resumes from (``ckpt_path``) and the policy it
    starts from (``mat.init_from``); refused here, before a stage records itself, holds the folder or starts a
    Trainer."""
    if cfg.get("predictor") is not None:
        read_predictor_checkpoint(cfg.predictor, "predictor")
    if cfg.get("mat") is None or cfg.get("stage", "all") not in ("all", "policy"):
        return
    settings = mat_settings(cfg)
    if settings.ckpt_path:
        if not Path(str(settings.ckpt_path)).is_file():
            raise ConfigError(f"ckpt_path={settings.ckpt_path}: no such MAT training checkpoint to resume from")
        _named("ckpt_path", check_resume_checkpoint, settings.ckpt_path)
    _named("mat.init_from", check_init_from, settings)


def check_cal_banks(cfg: DictConfig) -> None:
    """A predictor's calibration bank (``recalibrate.cal_bank``, ``calibration.cal_bank``) is one ``cal_bank_path``
    accepts (a path must exist)."""
    specs = {f"predictors.{k}": v for k, v in (cfg.get("predictors") or {}).items()}
    specs["predictor"] = cfg.get("predictor")
    for where, spec in specs.items():
        for key in ("recalibrate", "calibration"):
            part = spec.get(key) if isinstance(spec, DictConfig) else None
            if isinstance(part, DictConfig):
                cal_bank_path(_bank_path(cfg), part.get("cal_bank"), f"{where}.{key}.cal_bank")
