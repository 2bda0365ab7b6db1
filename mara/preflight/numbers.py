"""Numbers in range, lists that name something, and sizes that fit this machine: every setting of ``RANGES`` the
composed config holds, the simulator's node options, the predictors' cold estimates; episode counts and buffers
whose arrays could not fit in memory."""

from __future__ import annotations

import os

from omegaconf import DictConfig

from mara.core.config import ConfigError, plain_config
from mara.eval.runner import check_number, node_options
from mara.eval.settings import validate_sim_cfg
from mara.predictors.protocol import WARMUP_OBS
from mara.predictors.qr.head import check_cold_band
from mara.preflight.common import _select

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
    for name in predictors.keys() if isinstance(predictors, DictConfig) else []:  # cold estimates (predictors/cold.py)
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
