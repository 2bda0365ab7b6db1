"""The one place that turns a predictor name or config into a predictor.

A spec is ``None`` (no estimates), a name (``conf/predictor/<name>.yaml``, or the run's own ``predictors.<name>``
where the caller passes them), or a config mapping with ``name`` — Hydra-composed from
the same ``conf/predictor/`` group (``predictor=...``, ``predictors.fm....`` overrides), or just ``{name: ...}``, which
reads the group's file. Any predictor config may set ``first_obs`` (1–4, default 4): the observation from which the
simulator asks it for estimates (``mara/sim/env.py``); below 4 it should answer cold tasks (``qr``'s ``cold`` prior).
Which class a name builds is the kind's ``registry.builder`` (mara/core/registry.py). Training, validation,
evaluation, the prediction benchmarks, live mode and the bench all build their predictors here, so every path reads
one config source.
"""

from __future__ import annotations

from pathlib import Path

from mara.core.config import SHIPPED_CKPT_DIR, ConfigError, plain_config
from mara.core.registry import (
    as_config,
    import_object,
    predictor_entry,
    predictor_file,
    predictor_kinds,
    predictor_yaml,
)
from mara.curves.bank import SHIPPED_BANKS_DIR, CurveBank, default_bank_path, load_bank
from mara.predictors.protocol import WARMUP_OBS, RemainingPredictor, check_first_obs


def shipped_checkpoint(stem: str, bank_path=None) -> Path:
    """``mara/data/checkpoints/<stem>_<bank>.ckpt``: the file trained on a shipped bank when the bank at ``bank_path``
    is one that has its own, else the default bank's."""
    if bank_path is not None:
        bank = Path(bank_path).resolve()
        own = SHIPPED_CKPT_DIR / f"{stem}_{bank.stem}.ckpt"
        if bank.parent == SHIPPED_BANKS_DIR and own.exists():
            return own
    return SHIPPED_CKPT_DIR / f"{stem}_{default_bank_path().stem}.ckpt"


def known_predictors() -> list[str]:
    """Every registered predictor kind (``conf/predictor/<kind>.yaml`` with a ``registry`` block)."""
    return predictor_kinds()


def predictor_config(name: str):
    """``conf/predictor/<name>.yaml`` as a config (searched on ``MARA_CONF_PATH`` too; a bare ``{name}`` for a
    predictor without a file)."""
    return predictor_yaml(name)


def predictor_from(spec, bank_path=None, *, configured=None, built: dict | None = None) -> RemainingPredictor | None:
    """The predictor for ``spec`` (see the module docstring); ``bank_path`` picks the checkpoint trained on that bank.

    ``configured``: a run's ``predictors`` (name → config); a name is then one of them, else a ConfigError.
    ``built``: the caller's {name: predictor} for one run, so each named predictor is built once."""
    if spec is None:
        return None
    if isinstance(spec, str):
        if configured is None:
            return _build(predictor_config(spec), bank_path)
        if built is not None and spec in built:
            return built[spec]
        if spec not in configured and predictor_file(spec) is not None:  # registered, not listed in the run's config
            configured = {**configured, spec: predictor_config(spec)}
        if spec not in configured:
            raise ConfigError(f"predictor {spec!r} is not configured (known: {', '.join(configured) or 'none'})")
        predictor = predictor_from(configured[spec], bank_path)
        if built is not None:
            built[spec] = predictor
        return predictor
    cfg = as_config(spec)
    if "name" not in cfg or cfg.name is None:
        return None
    if len(cfg) == 1:  # only a name: the group's file
        return _build(predictor_config(str(cfg.name)), bank_path)
    return _build(cfg, bank_path)


def _build(cfg, bank_path=None) -> RemainingPredictor:
    """The predictor that the full config ``cfg`` names (``cfg.name`` a registered kind: its ``registry.builder``)."""
    name = cfg.get("name")
    entry = predictor_entry(str(name), missing_ok=True) if name is not None else None
    if entry is None or entry.name != name:
        raise ValueError(f"predictor.name must be one of {known_predictors()}, got {name!r}")
    predictor = import_object(entry.builder).from_config(cfg, bank_path)
    if cfg.get("first_obs") is not None:  # the simulator asks for estimates from this observation on (default 4)
        try:
            predictor.first_obs = check_first_obs(cfg.first_obs)
        except ValueError as exc:
            raise ConfigError(f"predictor {name}: {exc}") from None
    return predictor


def load_bank_and_predictor(bank_path: str | None, spec) -> tuple[CurveBank, RemainingPredictor | None]:
    """The bank (``None``: the packaged default) and the predictor for ``spec`` built on it."""
    bank = load_bank(bank_path or default_bank_path())
    return bank, predictor_from(spec, bank.path)


def trained_predictor_mismatch(trained, name: str | None) -> str | None:
    """Why a policy trained with the predictor config ``trained`` (its checkpoint's ``hyper_parameters.predictor``)
    must not be run with the method's predictor ``name``, or None when they agree. Compared: the predictor kind
    (``name``), its band levels — the policy's tokens read the band, so another band is another input — and the
    observation from which it answers (``first_obs``: cold estimates are another input too). Unknown on either side
    (no estimates, a checkpoint that did not record it): nothing to compare."""
    if not name or not trained or not trained.get("name"):
        return None
    given = predictor_config(name)
    t_name, g_name = str(trained["name"]), str(given.get("name", name))
    t_band, g_band = (plain_config(c.get("band")) for c in (trained, given))
    t_first, g_first = (c.get("first_obs") or WARMUP_OBS for c in (trained, given))
    if t_name != g_name or (t_band is not None and g_band is not None and t_band != g_band) or t_first != g_first:
        band = f" (band {t_band})" if t_band is not None else ""
        return f"it was trained with predictor {t_name!r}{band}, the method gives it {name!r}"
    return None
