"""Method configs and the objects they build: ``load_method_cfg`` (a method's YAML, found by the registry,
mara/core/registry.py), its allocator(s), the shipped policies; ``conf_dir`` and ``ConfigError`` re-exported from
mara/core/paths.py.

A method config has ``name``, ``kind`` (``policy`` acts in the simulator; ``bound`` is computed from
the episode by ``compute``), ``predictor`` (a conf/predictor name: the simulator's remaining-demand predictor) and,
for policies, ``allocator`` (a Hydra ``_target_`` spec), besides its registration (the registry's docstring).
``checkpoints: [{train_seed, ckpt_path}, ...]`` evaluates one allocator per training seed (learned policies).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mara.core import registry
from mara.core.paths import CONF_DIR, PACKAGE_DIR, SHIPPED_BANKS_DIR, ConfigError, conf_dir  # noqa: F401  (re-exported)


def available_methods() -> list[str]:
    """Every registered method (``conf/method/``, its ``experiments/`` folder, and ``MARA_CONF_PATH``'s)."""
    return sorted(registry.method_files())


def compose_method(name: str) -> DictConfig:
    """A method's YAML laid over the methods its ``defaults: [BASE, _self_]`` names (``LARA-best`` from ``LARA``):
    a plain, open config (overrides may add keys), interpolations unresolved (mara/core/registry.py)."""
    return OmegaConf.create(OmegaConf.to_container(registry.method_yaml(name)))


def load_method_cfg(name: str, overrides: DictConfig | dict | None = None) -> DictConfig:
    """The method config for ``name`` (exact file stem), merged with per-method ``overrides``."""
    cfg = compose_method(name)
    if overrides:
        cfg = OmegaConf.merge(cfg, overrides)
    if cfg.get("kind") not in ("policy", "bound"):
        raise ConfigError(f"method {name!r}: kind must be 'policy' or 'bound', got {cfg.get('kind')!r}")
    return cfg


def privileged_predictors() -> tuple[str, ...]:
    """Predictors that read the task's own curve (``registry.privileged``): bounds, refused to learned policies."""
    return registry.privileged_predictors()


def is_learned(cfg: DictConfig) -> bool:
    """A learned policy: its allocator loads trained weights (the registry's test, ``registry.is_learned``, which
    ``registry.method(name).learned`` records for a registered method)."""
    return registry.is_learned(cfg)


def check_predictor_allowed(cfg: DictConfig) -> None:
    """A learned policy may never be evaluated with a privileged (bound-only) predictor: one-line ConfigError."""
    pred = cfg.get("predictor")
    if pred in privileged_predictors() and is_learned(cfg):
        raise ConfigError(
            f"method {cfg.name!r}: predictor {pred!r} is a perfect-prediction bound (it reads the task's "
            f"own curve) and is refused to learned policies at evaluation time; use fm or wls"
        )


def check_method_cfg(cfg: DictConfig) -> None:
    """Settings of a composed method config that the runner reads, checked before any work (one-line ConfigError)."""
    check_predictor_allowed(cfg)
    w = cfg.get("workers", 1)
    if isinstance(w, bool) or not isinstance(w, int) or w < 0:
        raise ConfigError(f"method {cfg.name!r}: workers must be an integer >= 0 (0: one per CPU core), got {w!r}")


SHIPPED_CKPT_DIR = PACKAGE_DIR / "data" / "checkpoints"
#: the MARA policy shipped for live mode's defaults (M = 2, K = 4, T = 120, budgets x 0.25; docs/live.md)
SHIPPED_LIVE_POLICY = SHIPPED_CKPT_DIR / "mara_live.ckpt"


def shipped_policy_checkpoints(cfg: DictConfig, bank_path) -> list[dict]:
    """``[{train_seed, ckpt_path}, ...]`` of the policies shipped for a learned method (``shipped: <prefix>`` in its
    config: ``mara/data/checkpoints/<prefix>_<bank>_seed<N>.ckpt`` for a bank shipped in the package); [] if none."""
    import re

    prefix = cfg.get("shipped")
    bank = Path(bank_path).resolve()
    if not prefix or bank.parent != SHIPPED_BANKS_DIR.resolve():
        return []
    pat = re.compile(rf"^{re.escape(str(prefix))}_{re.escape(bank.stem)}_seed(\d+)\.ckpt$")
    found = [(int(m.group(1)), p) for p in SHIPPED_CKPT_DIR.glob("*.ckpt") if (m := pat.match(p.name))]
    return [{"train_seed": seed, "ckpt_path": str(p)} for seed, p in sorted(found)]


def with_shipped_policies(methods: list[str], overrides: dict, bank_path) -> tuple[dict, dict]:
    """Per-method overrides where every learned method given no checkpoint (no ``ckpt_path``, no ``checkpoints``)
    evaluates its shipped policies instead; returns (overrides, {method: [checkpoint paths]} that were filled in).
    Used by ``python -m mara.evaluate`` only: training runs pass their own fresh checkpoints."""
    out, used = dict(overrides), {}
    for m in methods:
        cfg = load_method_cfg(m, out.get(m))
        if not is_learned(cfg) or cfg.get("ckpt_path") or cfg.get("checkpoints"):
            continue
        ckpts = shipped_policy_checkpoints(cfg, bank_path)
        if ckpts:
            out[m] = dict(out.get(m) or {}, checkpoints=ckpts)
            used[m] = [c["ckpt_path"] for c in ckpts]
    return out, used


def build_allocators(cfg: DictConfig) -> list[tuple[int | None, object]]:
    """Instantiate a policy method's allocator(s): ``[(train_seed or None, allocator), ...]``."""
    from hydra.utils import instantiate

    if "allocator" not in cfg:
        raise ConfigError(f"method {cfg.name!r}: policy without an 'allocator' entry")
    ckpts = cfg.get("checkpoints")
    try:
        if not ckpts:
            return [(None, instantiate(cfg.allocator))]
        return [(int(c.train_seed), instantiate(cfg.allocator, ckpt_path=c.ckpt_path)) for c in ckpts]
    except Exception as exc:  # instantiate wraps user errors; keep the message one line
        cause = exc.__cause__ or exc
        raise ConfigError(f"method {cfg.name!r}: cannot build allocator: {cause}") from None


def plain_config(obj):
    """OmegaConf containers (anywhere inside ``obj``) as plain dicts/lists, resolved: hyper-parameters that load as
    data."""
    if OmegaConf.is_config(obj):
        return OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, dict):
        return {k: plain_config(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [plain_config(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(plain_config(v) for v in obj)
    return obj
