"""The one check before any work, shared by ``mara.train``, ``mara.evaluate`` and ``mara.live`` (``preflight``).

A mistake in a run's settings should cost the user one line on stderr and exit status 2, not minutes of training
followed by a traceback. Everything that can be known from the composed config is checked here, before the first
stage starts: method names and every ``method_overrides`` key (a typo names the closest valid key), numbers in
range, every checkpoint readable, of the right kind and fit for the run (``check_policy_fit``: the one policy/run
fit check, also called at run time and in live mode), the run folder writable, the optional ``ray`` dependency.
Unknown top-level keys (``sim.nodez=3``) are refused earlier, when the command line is composed
(``mara.core.cli.check_group_overrides``).
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from mara.core.config import (
    SHIPPED_LIVE_POLICY,
    ConfigError,
    available_methods,
    is_learned,
    load_method_cfg,
    plain_config,
    with_shipped_policies,
)
from mara.core.registry import import_object, predictor_entry, predictor_file, predictor_kinds, teachers
from mara.curves.bank import default_bank_path, shipped_bank_path
from mara.eval.policy_fit import check_policy_fit, policy_facts
from mara.eval.runner import check_number, node_options
from mara.eval.settings import trace_job_settings, validate_sim_cfg
from mara.mat.allocator import read_policy_checkpoint
from mara.mat.train import check_init_from, check_resume_checkpoint, checkpoint_method, with_run_policy
from mara.predictors.prefix import cal_bank_path
from mara.predictors.protocol import WARMUP_OBS
from mara.predictors.qr.head import check_cold_band
from mara.train_settings import mat_settings, trained_method


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def closest(word: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices`` to a misspelt ``word``, else an empty string."""
    match = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


# --------------------------------------------------------------------------------------------- method overrides
@dataclass
class CheckpointEntry:
    """One trained policy of a learned method: ``{train_seed, ckpt_path}``."""

    ckpt_path: str
    train_seed: int = 0


@dataclass
class MethodOverride:
    """Schema of ``method_overrides.<METHOD>``: the settings a method config has, with their types. Which of them a
    given method takes is its own config's keys (``checkpoints`` too for learned methods)."""

    name: Optional[str] = None
    kind: Optional[str] = None
    predictor: Optional[str] = None
    ckpt_path: Optional[str] = None
    checkpoints: Optional[List[CheckpointEntry]] = None
    shipped: Optional[str] = None
    allocator: Optional[Dict[str, Any]] = None
    admission_limit: Optional[bool] = None
    time_limit_s: Optional[float] = None
    workers: Optional[int] = None
    chosen_by: Optional[Dict[str, Any]] = None  # a selection bound's Clairvoyant options (Slack-Truth-chosen)


def check_method_override(name: str, override: dict, predictors) -> None:
    """Every key of ``method_overrides.<name>`` is one the method takes, of the schema's type: one-line ConfigError
    naming the key and the closest valid one."""
    where = f"method_overrides.{name}"
    if not isinstance(override, dict):
        raise ConfigError(f"{where} must be a mapping of method settings, got {override!r}")
    base = load_method_cfg(name)
    allowed = set(base.keys()) | ({"checkpoints", "ckpt_path"} if is_learned(base) else set())
    for key in override:
        if key not in allowed:
            raise ConfigError(
                f"{where}.{key}: {name} has no setting {key!r}{closest(key, allowed)}; "
                f"it takes: {', '.join(sorted(allowed))}"
            )
    try:
        OmegaConf.merge(OmegaConf.structured(MethodOverride), override)
    except Exception as exc:  # omegaconf's ValidationError: the first line says the value and the type
        key = getattr(exc, "full_key", None)
        raise ConfigError(f"{where}{'.' + str(key) if key else ''}: {_first_line(exc)}") from None
    pred = override.get("predictor")
    if pred is not None and pred not in (predictors or {}) and predictor_file(str(pred)) is None:
        raise ConfigError(
            f"{where}.predictor: no predictor {pred!r} is configured{closest(pred, predictors or {})}; "
            f"known: {', '.join(predictors or {}) or 'none'}"
        )
    alloc = override.get("allocator")
    if alloc:
        target = alloc.get("_target_") or (base.get("allocator") or {}).get("_target_")
        _check_allocator_keys(f"{where}.allocator", target, {k: v for k, v in alloc.items() if k != "_target_"})


#: constructor annotations whose values the check can judge (``from __future__ import annotations``: strings)
_SCALAR_TYPES = {"bool": (bool,), "int": (int,), "float": (int, float), "str": (str,), "None": (type(None),)}


def _fits_annotation(value, annotation) -> bool:
    """Whether ``value`` is of a scalar annotation (``bool``, ``int``, ``float``, ``str``, unions with ``None``); any
    other annotation is not judged here (True). A bool is not taken for a number, nor a number for a bool."""
    parts = [a.strip() for a in str(annotation).split("|")]
    if annotation is inspect.Parameter.empty or not all(p in _SCALAR_TYPES for p in parts):
        return True
    if isinstance(value, bool):
        return "bool" in parts
    return any(isinstance(value, t) for p in parts if p != "bool" for t in _SCALAR_TYPES[p])


def _check_allocator_keys(where: str, target, values: dict) -> None:
    """Allocator overrides are constructor arguments of the allocator class, of the scalar type it declares (an
    unknown name or a wrong type would fail, or be taken for something else, only later)."""
    from hydra.utils import get_class

    try:
        params = inspect.signature(get_class(str(target))).parameters
    except Exception as exc:
        raise ConfigError(f"{where}._target_: cannot import {target!r} ({type(exc).__name__})") from None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [p for p in params if p != "self"]
    for key, value in values.items():
        if key not in valid:
            raise ConfigError(
                f"{where}.{key}: {str(target).rsplit('.', 1)[-1]} takes no argument {key!r}"
                f"{closest(key, valid)}; it takes: {', '.join(valid)}"
            )
        if not _fits_annotation(value, params[key].annotation):
            raise ConfigError(f"{where}.{key}: expected {params[key].annotation}, got {value!r}")


def check_method_names(names, where: str) -> None:
    """Every name is a ``conf/method/<NAME>.yaml``: one line naming an unknown one and the closest."""
    known = available_methods()
    for m in names:
        if not isinstance(m, str) or m not in known:
            place = "" if where == "methods" else f" in {where}"
            raise ConfigError(f"unknown method {m!r}{place}{closest(m, known)}; available: {', '.join(known)}")


def check_once(names: list, where: str) -> None:
    """Each method is named once: a repeated name would evaluate it again and put its rows twice into results.json."""
    twice = sorted({m for m in names if names.count(m) > 1}, key=names.index)
    if twice:
        raise ConfigError(
            f"{where} names {', '.join(map(str, twice))} more than once: name each method once "
            f"(got {where}=[{','.join(map(str, names))}])"
        )


def check_methods(cfg: DictConfig, need_methods: bool) -> list[str]:
    """``methods`` (a non-empty list of known names when the run evaluates) and ``method_overrides``."""
    methods = cfg.get("methods")
    if methods is None:
        methods = []
    if not isinstance(methods, (list, ListConfig)):
        raise ConfigError(
            f"methods must be a list of method names, e.g. methods=[FIFO,EDF], got {plain_config(methods)!r}"
        )
    methods = list(methods)
    if need_methods and not methods:
        raise ConfigError(f"methods is empty: name at least one method; available: {', '.join(available_methods())}")
    check_method_names(methods, "methods")
    check_once(methods, "methods")
    overrides = plain_config(cfg.get("method_overrides")) or {}
    if not isinstance(overrides, dict):
        raise ConfigError(f"method_overrides must map method names to settings, got {overrides!r}")
    check_method_names(list(overrides), "method_overrides")
    predictors = list((cfg.get("predictors") or {}).keys())
    for name, override in overrides.items():
        check_method_override(name, override or {}, predictors)
    return methods


# ----------------------------------------------------------------------------------------------------- numbers
#: (setting, integer?, lower bound, lower bound included?, upper bound); absent or null settings are not checked
RANGES = (
    ("seed", True, 0, True, None),
    ("eval.episodes", True, 1, True, None),
    ("mat.seed", True, 0, True, None),
    ("mat.total_env_steps", True, 0, True, None),  # 0: imitation only (check_numbers: needs mat.imitation.enabled)
    ("mat.num_threads", True, 1, True, None),
    ("mat.rollout.n_episodes", True, 1, True, None),
    ("mat.rollout.n_steps", True, 1, True, None),
    ("mat.rollout.n_groups", True, 1, True, None),
    ("mat.rollout.stagger", True, 0, True, None),
    ("mat.rollout.scale", False, 0, False, None),
    ("mat.rollout.fm_cache_entries", True, 1, True, None),
    ("mat.ppo.lr", False, 0, False, None),
    ("mat.ppo.gamma", False, 0, True, 1),
    ("mat.ppo.gae_lambda", False, 0, True, 1),
    ("mat.ppo.clip_coef", False, 0, False, None),
    ("mat.ppo.update_epochs", True, 1, True, None),
    ("mat.ppo.n_minibatches", True, 1, True, None),
    ("mat.ppo.minibatch_size", True, 1, True, None),
    ("mat.ppo.max_grad_norm", False, 0, False, None),
    ("mat.workload.load", False, 0, True, 1),
    ("mat.workload.train_root", True, 0, True, None),
    ("mat.validation.roots", True, 0, True, None),
    ("mat.validation.load", False, 0, True, 1),
    ("mat.validation.n_episodes", True, 1, True, None),
    ("mat.validation.every_n_iterations", True, 1, True, None),
    ("mat.imitation.n_episodes", True, 1, True, None),
    ("mat.imitation.n_steps", True, 1, True, None),
    ("mat.imitation.dagger_rounds", True, 0, True, None),
    ("mat.imitation.epochs", True, 1, True, None),
    ("mat.imitation.lr", False, 0, False, None),
    ("mat.imitation.batch_size", True, 1, True, None),
    ("predictor.data.train_examples", True, 1, True, None),
    ("predictor.data.val_examples", True, 1, True, None),
    ("predictor.data.batch_size", True, 1, True, None),
    ("predictor.inference.n_samples", True, 1, True, None),
    ("predictor.inference.n_steps", True, 1, True, None),
    ("predictor.band.coverage", False, 0, False, 1),
    ("predictor.train.max_epochs", True, 1, True, None),
    ("live.episodes", True, 1, True, None),
    ("live.load", False, 0, True, 1),
    ("live.root", True, 0, True, None),
    ("live.time_scale", False, 0, False, None),
    ("live.calibration_target", False, 0, False, 1),
    ("live.threads", True, 1, True, None),
    ("live.progress_every", True, 1, True, None),
)


#: list settings that must name at least one value, with what the value is
LISTS = {
    "eval.roots": " (an integer n: roots 0..n-1, or a list of roots)",
    "eval.task_sets": " (task sets: ID, RL_OOD, ViT_OOD)",
    "sim.loads": " (arrival probabilities p)",
    "mat.validation.roots": " (validation roots)",
    "mat.workload.load": " (a training load p, or a list of them)",
}


def _select(cfg: DictConfig, key: str):
    try:
        return OmegaConf.select(cfg, key, default=None)
    except Exception:  # an interpolation that does not resolve is reported by the stage that reads it
        return None


def check_range(where: str, value, integer: bool, lo, lo_in: bool, hi) -> None:
    """One value (or each of a list) is a number of the right kind within [lo, hi]: one-line ConfigError."""
    values = plain_config(value)
    for v in values if isinstance(values, list) else [values]:
        x = check_number(where, v, int if integer else float)
        if (lo is not None and (x < lo if lo_in else x <= lo)) or (hi is not None and x > hi):
            span = f"in [{lo}, {hi}]" if hi is not None else f"{'>=' if lo_in else '>'} {lo}"
            raise ConfigError(f"{where} must be {'an integer' if integer else 'a number'} {span}, got {v!r}")


def check_numbers(cfg: DictConfig) -> None:
    """Every setting of ``RANGES`` present in ``cfg``, the evaluation roots and the trainer's epochs."""
    for key, integer, lo, lo_in, hi in RANGES:
        value = _select(cfg, key)
        if value is not None:
            check_range(key, value, integer, lo, lo_in, hi)
    for key in LISTS:  # an empty list would fail later, in words that do not name the setting
        if plain_config(_select(cfg, key)) == []:
            raise ConfigError(f"{key}=[] names nothing: give at least one value" + LISTS[key])
    roots = plain_config(_select(cfg, "eval.roots"))
    if isinstance(roots, list):
        check_range("eval.roots", roots, True, 0, True, None)
    sim = _select(cfg, "sim")
    if isinstance(sim, DictConfig):
        validate_sim_cfg(sim) if "loads" in sim else node_options(sim)
    if _select(cfg, "mat.total_env_steps") == 0 and not _select(cfg, "mat.imitation.enabled"):
        raise ConfigError(
            "mat.total_env_steps must be an integer >= 1 when mat.imitation.enabled is false "
            "(0 means imitation only, no PPO)"
        )
    epochs = _select(cfg, "trainer.max_epochs")
    if epochs is not None and epochs != -1:  # -1: Lightning's "no epoch limit"
        check_range("trainer.max_epochs", epochs, True, 1, True, None)
    predictors = _select(cfg, "predictors")
    for name in predictors.keys() if isinstance(predictors, DictConfig) else []:  # cold estimates (bands/cold.py)
        for key, integer, lo, lo_in, hi in (
            ("first_obs", True, 1, True, WARMUP_OBS),
            ("cold.k", True, 1, True, None),
            ("cold.band", False, 0, False, 1),
        ):
            value = _select(cfg, f"predictors.{name}.{key}")
            if value is not None:
                check_range(f"predictors.{name}.{key}", value, integer, lo, lo_in, hi)
        if _select(cfg, f"predictors.{name}.cold.band") is not None:
            check_cold_band(_select(cfg, f"predictors.{name}.cold.band"), f"predictors.{name}.cold.band")


# ------------------------------------------------------------------------------------------------------- sizes
#: bytes one task slot takes in an episode batch (ten [E, N] arrays: arrival ... lr, family), measured on the default
#: protocol: 2400 episodes of N = 50 slots hold 10,032 bytes each (``build_episodes``)
TASK_SLOT_BYTES = 200
#: seconds to draw one episode of the default protocol (2400 in 12.8 s on the 2-core reference machine, busy)
EPISODE_SECONDS = 0.005
#: bytes a MAT rollout or imitation buffer keeps per env-step and admission slot: a v3 token (31 slot + 3 global
#: float32 features) and eight float32 per-slot values (action, log-prob, value, mask, ...)
SLOT_STEP_BYTES = 4 * (34 + 8)


def physical_memory() -> int:
    """Bytes of memory this machine has (the bound a run's arrays must fit in)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _size(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n / 1024:,.1f} KiB"


def _duration(seconds: float) -> str:
    for unit, scale in (("years", 365 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= scale:
            return f"{seconds / scale:,.1f} {unit}"
    return f"{seconds:,.0f} s"


def _int(cfg, key: str, default: int = 1) -> int:
    value = _select(cfg, key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def check_sizes(cfg: DictConfig) -> None:
    """Episode counts and buffer sizes whose arrays cannot fit in this machine's memory: one line naming the setting,
    the memory (a lower bound: the task arrays alone) and, for evaluation episodes, the time to draw them."""
    memory = physical_memory()
    ev, loads = _select(cfg, "eval"), plain_config(_select(cfg, "sim.loads"))
    steps, slots = _int(cfg, "sim.steps", 500), _int(cfg, "sim.max_active", 10)
    if isinstance(ev, DictConfig) and ev.get("episodes") is not None:
        roots = plain_config(ev.get("roots"))
        n_roots = len(roots) if isinstance(roots, list) else _int(cfg, "eval.roots", 1)
        sets = plain_config(ev.get("task_sets"))
        n_sets, n_loads = (len(sets) if isinstance(sets, list) else 1), (len(loads) if isinstance(loads, list) else 1)
        episodes = int(ev.episodes)
        total = n_sets * n_loads * n_roots * episodes
        top = max((float(x) for x in loads), default=0.0) if isinstance(loads, list) else 0.0
        per_episode = max(1.0, steps * top) * TASK_SLOT_BYTES  # expected tasks per episode at the highest load
        if total * per_episode > memory:
            fit = max(1, int(memory / per_episode / max(1, n_sets * n_loads * n_roots)))
            raise ConfigError(
                f"eval.episodes={episodes}: {n_sets} task sets x {n_loads} loads x {n_roots} roots x "
                f"{episodes} = {total:,} episodes, whose task arrays alone need "
                f"{_size(total * per_episode)} of memory (this machine has {_size(memory)}) and "
                f"drawing them "
                f"{_duration(total * EPISODE_SECONDS)}; at most {fit:,} episodes fit here"
            )
    for part in ("rollout", "imitation"):
        n, length = _select(cfg, f"mat.{part}.n_episodes"), _select(cfg, f"mat.{part}.n_steps")
        if not isinstance(n, int) or isinstance(n, bool):
            continue
        length = int(length) if isinstance(length, int) and not isinstance(length, bool) else steps
        need = n * length * slots * SLOT_STEP_BYTES
        if need > memory:
            raise ConfigError(
                f"mat.{part}.n_episodes={n}: {n:,} episodes x {length} steps x {slots} slots need "
                f"{_size(need)} of memory for their buffer (this machine has {_size(memory)}); at most "
                f"{max(1, int(memory / (length * slots * SLOT_STEP_BYTES))):,} episodes fit here"
            )


# ------------------------------------------------------------------------------------------------- checkpoints
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


def check_engine(cfg: DictConfig, methods: list[str]) -> None:
    """On ``sim.engine=replay`` (the trace replay, one episode at a time) every method runs there: a selection bound
    (``chosen_by``: a rule restricted to the Clairvoyant's chosen tasks of the whole stack) runs on ``batched`` only."""
    if (cfg.get("sim") or {}).get("engine", "batched") != "replay":
        return
    overrides = plain_config(cfg.get("method_overrides")) or {}
    for m in methods:
        if load_method_cfg(m, overrides.get(m)).get("chosen_by") is not None:
            raise ConfigError(f"method {m}: chosen_by (a selection bound) runs on sim.engine=batched only")


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


def _named(setting: str, check, *args) -> None:
    """``check(*args)``, its one-line ConfigError prefixed with the setting it is about when it does not name it."""
    try:
        check(*args)
    except ConfigError as exc:
        msg = _first_line(exc)
        raise ConfigError(msg if msg.startswith(setting) else f"{setting}: {msg}") from None


# ------------------------------------------------------------------------------------------ folders, extras
def check_writable(folder, where: str) -> None:
    """``folder`` can take files: a probe file is created and removed, and folders created for it are removed."""
    folder = Path(str(folder))
    created, p = [], folder
    while not p.exists() and p != p.parent:
        created.append(p)
        p = p.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write_probe_{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(f"{where} {folder} is not writable ({exc.strerror or type(exc).__name__})") from None
    finally:
        for d in created:  # deepest first
            try:
                d.rmdir()
            except OSError:
                break


def run_folder(cfg: DictConfig) -> tuple[Path | None, str]:
    """(the run folder the entry point will write, the setting that names it); None when neither is set."""
    given = (cfg.get("paths") or {}).get("output_dir")
    if given:
        return Path(str(given)), "paths.output_dir"
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir), "hydra.run.dir"
    except Exception:  # composed outside @hydra.main (tests, notebooks): a fresh folder is made later
        return None, ""


RAY_HINT = 'pip install -e ".[cluster]"'


def check_live_workers(cfg: DictConfig) -> None:
    """``live.workers=ray`` needs the optional ``ray`` package (the ``cluster`` extra)."""
    if str((cfg.get("live") or {}).get("workers")) == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(f"live.workers=ray needs Ray, which is not installed: {RAY_HINT} (or live.workers=process)")


def check_live_predictors(cfg: DictConfig, methods: list[str]) -> None:
    """A policy method live mode runs reads a predictor live mode configures (``predictors`` of conf/live.yaml): one
    line naming the method and the predictor it would need (MARA-suite's decision head is trained on the zoo bank's
    curves, not on live jobs)."""
    overrides = plain_config(cfg.get("method_overrides")) or {}
    configured = list((cfg.get("predictors") or {}).keys())
    for m in methods:
        mcfg = load_method_cfg(m, overrides.get(m))
        pred = mcfg.get("predictor")
        if mcfg.get("kind") != "policy" or pred is None or not isinstance(pred, str) or pred in configured:
            continue
        raise ConfigError(
            f"{m} reads predictor {pred!r}, which live mode does not configure (live predictors: "
            f"{', '.join(configured) or 'none'}); run {m} in the simulator (python -m mara.evaluate), "
            f"or pick live methods on those predictors, e.g. methods=[MARA,EDF]"
        )


# ---------------------------------------------------------------------------------------------------- the check
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


def check_teachers(cfg: DictConfig) -> None:
    """``mat.imitation.teacher`` and every setting's teacher of ``mat.imitation.suite`` are methods registered as
    teachers (``teacher: true`` in their conf/method YAML)."""
    imitation = _select(cfg, "mat.imitation")
    if not isinstance(imitation, DictConfig) or not imitation.get("enabled", False):
        return
    named = [("mat.imitation.teacher", imitation.get("teacher"))]
    named += [
        (f"mat.imitation.suite[{i}].teacher", s.get("teacher"))
        for i, s in enumerate(imitation.get("suite") or [])
        if isinstance(s, DictConfig)
    ]
    allowed = teachers()
    for where, name in named:
        if name is not None and name not in allowed:
            check_method_names([name], where)
            raise ConfigError(
                f"{where}={name} is not a teacher (a rule whose conf/method YAML says teacher: true); "
                f"teachers: {', '.join(allowed)}"
            )


def preflight(cfg: DictConfig, entry: str) -> None:
    """Every check that can be made before any work (``entry``: ``train``, ``evaluate`` or ``live``); a mistake is
    one ConfigError, which the entry points print as one line and exit 2."""
    kind = cfg.get("experiment_kind")
    if entry == "train" and kind == "trace_policy":
        # MARA's trace policy reads only its own block (mara/train_settings.py checks it) and writes its run folder
        folder, where = run_folder(cfg)
        if folder is not None:
            check_writable(folder, where)
        return
    check_numbers(cfg)
    check_sizes(cfg)
    if entry == "train":
        need = cfg.get("stage", "all") in ("all", "evaluate") and kind != "paper"
    elif entry == "evaluate":
        need = kind not in ("prediction", "prediction_lofo")
    else:
        need = cfg.get("action", "run") == "run"
    methods = check_methods(cfg, need)
    if entry == "train":
        check_teachers(cfg)
    check_cal_banks(cfg)
    if entry == "live":
        check_live_workers(cfg)
        if cfg.get("jobs"):  # a user's job file runs jobs_methods; "auto" picks a method that fits the cluster itself
            chosen = cfg.get("jobs_methods")
            methods = list(chosen) if isinstance(chosen, (list, ListConfig)) else []
            check_method_names(methods, "jobs_methods")
            check_once(methods, "jobs_methods")
        check_live_predictors(cfg, methods)
    if entry == "train" and kind != "paper":
        check_stage_inputs(cfg)
    if entry == "evaluate" and kind == "prediction":  # the trace whose jobs the predictors are also scored on
        trace_job_settings((cfg.get("prediction") or {}).get("trace_jobs"))
    if need:
        check_engine(cfg, methods)
        check_checkpoints(cfg, methods, _policy_defaults(cfg, entry, methods))
    folder, where = run_folder(cfg)
    if folder is not None:
        check_writable(folder, where)


def _policy_defaults(cfg: DictConfig, entry: str, methods: list[str]) -> dict:
    """{method: (method config to check them under or None: its own, checkpoint paths)} for a learned method given
    no checkpoint: the shipped policies (``mara.evaluate``), the live policy (``mara.live``), or the run's
    ``policy_ckpt`` (``mara.train stage=evaluate``)."""
    if entry == "evaluate":
        if not cfg.get("shipped_policies", True):
            return {}
        opts = node_options(cfg.get("sim") or {})
        if opts["node_speed"] is not None or opts["switch_cost"] > 0:
            return {}  # the shipped policies are not run on heterogeneous nodes (mara.evaluate drops them)
        _, used = with_shipped_policies(methods, plain_config(cfg.get("method_overrides")) or {}, _bank_path(cfg))
        return {m: (None, paths) for m, paths in used.items()}
    if entry == "live":
        ckpt = (cfg.get("live") or {}).get("policy_ckpt") or (
            SHIPPED_LIVE_POLICY if SHIPPED_LIVE_POLICY.exists() else None
        )
        return {"MARA": (None, [str(ckpt)])} if ckpt else {}
    ckpt = cfg.get("policy_ckpt")
    if not ckpt:
        return {}
    try:
        trained = checkpoint_method(ckpt)  # named by what it was trained as, like the run names it
    except ConfigError:
        trained = trained_method(cfg)  # not a readable policy: the checks below say so
    # the run evaluates that policy on its own training predictor, so only its M and K are checked here
    as_run = OmegaConf.create({"name": trained, "kind": "policy", "predictor": None})
    return {trained: (as_run, [str(ckpt)])} if trained in with_run_policy(methods, trained) else {}


def _bank_path(cfg: DictConfig):
    path = (cfg.get("bank") or {}).get("path")
    return shipped_bank_path(path) if path else default_bank_path()
