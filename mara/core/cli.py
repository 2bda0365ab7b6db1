"""Shared helpers for the thin Hydra entry points: run folder and one-line errors."""

from __future__ import annotations

import difflib
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from mara.core.config import CONF_DIR, ConfigError, conf_dir
from mara.core.registry import conf_dirs

#: mistakes a user can make in config or data: reported as one line, never a traceback (a bank that cannot be used,
#: ``BankError``, is a ValueError and caught as one below)
USER_ERRORS = (ConfigError, FileNotFoundError)


def output_dir(cfg: DictConfig) -> Path:
    """The run folder: ``paths.output_dir`` if set, else Hydra's run dir, else a fresh outputs/ folder."""
    given = (cfg.get("paths") or {}).get("output_dir")
    if not given:
        try:
            from hydra.core.hydra_config import HydraConfig

            given = HydraConfig.get().runtime.output_dir
        except Exception:  # composed outside @hydra.main (tests, notebooks)
            given = None
    return made_run_dir(given, str(cfg.get("task_name", "run")))


def made_run_dir(folder: str | None, task_name: str) -> Path:
    """The run folder ``folder``, made; None: a fresh ``outputs/<task_name>/<time>/`` folder."""
    out = Path(folder) if folder else Path("outputs") / task_name / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)
    return out


def run_cli(fn, cfg: DictConfig):
    """Call ``fn(cfg)``; configuration and data mistakes exit with status 2 and one line on stderr."""
    try:
        return fn(cfg)
    except USER_ERRORS as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ValueError as exc:  # bad values reaching the simulator or workload generator
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def exit_on_error(message: str | None) -> None:
    """A command's last word: when the run reports an error, print it as one line on stderr and exit with status 1."""
    if message:
        print(f"error: {message}", file=sys.stderr)
        sys.exit(1)


def unknown_group_option(argv: list[str], conf_dir: Path = CONF_DIR) -> str | None:
    """The one-line error for a command-line override that picks a missing option of a config group
    (``experiment=typo`` → "unknown experiment 'typo'; available: ..."), or None when every choice exists.

    Hydra silently ignores a missing option of an ``optional`` group (``experiment``) and raises a multi-line
    error for the others; this check runs before Hydra, for every entry point."""
    for arg in argv:
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        group = key.lstrip("+~").split("@", 1)[0]
        folders = [d for d in ([conf_dir] if conf_dir != CONF_DIR else conf_dirs()) if (d / group).is_dir()]
        if not group or "." in group or "/" in group or not folders:
            continue
        for choice in value.split(","):  # multirun sweeps: experiment=a,b
            choice = choice.strip()
            if choice in ("", "null") or "(" in choice or "*" in choice:
                continue
            if not any((d / group / f"{choice}.yaml").exists() for d in folders):
                options = sorted({p.stem for d in folders for p in (d / group).glob("*.yaml")})
                return f"unknown {group} {choice!r}; available: {', '.join(options)}"
    return None


def composition_error(config_name: str, argv: list[str], conf_dir: Path = CONF_DIR) -> str | None:
    """The one-line error for command-line overrides Hydra cannot compose into ``conf/<config_name>.yaml`` (a
    misspelt key ``sim.nodez=3`` names the closest valid key; an override that does not parse says so), or None.

    Hydra reports these in several lines after its own banner; composing once here gives the user one line. A sweep
    (``-m seed=0,1,2``) is composed with its first value."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = [a for a in argv if not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except HydraException as exc:
        return f"cannot read the command-line overrides: {_first_line(exc)}"
    overrides = []
    for o in parsed:
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()), None)
            overrides.append(f"{o.get_key_element()}={first}" if first is not None else o.input_line)
        else:
            overrides.append(o.input_line)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            try:
                cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
            except Exception as exc:
                return _explain_composition(exc, config_name)
            added = _unknown_addition(config_name, parsed, conf_dir)
            if added:
                return added
    finally:
        GlobalHydra.instance().clear()
    return None if _is_multirun(argv) else _unwritable_run_dir(cfg)


#: keys a ``+key=value`` may add although no config declares them: settings the code reads only when given, and
#: mappings whose keys are the user's own names (methods, predictors, extra benchmark rows)
ADDABLE = (
    "method_overrides",
    "policy_ckpt",
    "ckpt_path",
    "predictors",
    "prediction.extra",
    "live.crash",
    "mat.ppo.value_warmup_head_only",
    "hydra",
)


def _is_multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def _unknown_addition(config_name: str, parsed, conf_dir: Path) -> str | None:
    """The one-line error for a ``+key=value`` (or ``++``) that adds a key nothing reads (``+sim.nodez=3``), checked
    as ``sim.nodez=3`` is: the key must exist in the configuration, be one of :data:`ADDABLE`, or sit in an empty
    mapping; None when every addition is one of those. Must be called inside ``initialize_config_dir``."""
    from hydra import compose
    from omegaconf import OmegaConf

    adds = [o for o in parsed if (o.is_add() or o.is_force_add()) and "@" not in o.key_or_group]
    adds = [o for o in adds if "." in o.key_or_group or not (conf_dir / o.key_or_group).is_dir()]  # +scenario=stress
    if not adds:
        return None
    rest = [o.input_line for o in parsed if o not in adds and not o.is_sweep_override()]
    try:
        base = compose(config_name=config_name, overrides=rest)
    except Exception:  # an addition others depend on: Hydra's own composition already passed
        return None
    for o in adds:
        key = o.key_or_group
        if any(key == a or key.startswith(a + ".") for a in ADDABLE):
            continue
        if OmegaConf.select(base, key, default="\0missing") != "\0missing":
            continue  # ++ on a key that exists: an ordinary override
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent, default=None) if parent else base
        if parent and OmegaConf.is_dict(node) and len(node) == 0:
            continue  # an open mapping
        known = [str(k) for k in node.keys()] if OmegaConf.is_dict(node) else []
        match = difflib.get_close_matches(leaf, known, n=1, cutoff=0.6)
        hint = f" (did you mean {(parent + '.' if parent else '') + match[0]!r}?)" if match else ""
        where = f"{parent!r} has" if parent else "the configuration has"
        return (
            f"unknown config key {key!r} in {o.input_line}{hint}: nothing reads it; {where}: "
            f"{', '.join(known) or 'no settings'}"
        )
    return None


def _unwritable_run_dir(cfg) -> str | None:
    """Hydra creates ``hydra.run.dir`` before the entry point runs; a folder that cannot be made there is one line
    here instead of Hydra's traceback. Nothing is created: the nearest existing folder above it must be writable."""
    import os

    from omegaconf import OmegaConf

    try:
        run_dir = OmegaConf.select(cfg, "hydra.run.dir")
    except Exception:  # an interpolation only Hydra's run can resolve: Hydra reports it
        return None
    if not run_dir:
        return None
    p = Path(str(run_dir)).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    if not p.is_dir() or not os.access(p, os.W_OK | os.X_OK):
        return (
            f"hydra.run.dir {run_dir} cannot be created: {p} is {'not a folder' if not p.is_dir() else 'not writable'}"
        )
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _explain_composition(exc: BaseException, config_name: str) -> str:
    """One line for a composition error: an unknown key with the closest key at that level of the config."""
    import difflib
    import re

    from hydra import compose
    from omegaconf import OmegaConf

    m = re.search(r"Could not override '([^']+)'", str(exc))
    if not m:
        return f"cannot compose the configuration: {_first_line(exc)}"
    key = m.group(1)
    parent, _, leaf = key.rpartition(".")
    try:
        node = (
            OmegaConf.select(compose(config_name=config_name), parent) if parent else compose(config_name=config_name)
        )
        known = list(node.keys()) if OmegaConf.is_dict(node) else []
    except Exception:
        known = []
    if not known and parent:
        return f"unknown config key {key!r}: {parent!r} has no such setting (to add a new key use +{key}=...)"
    match = difflib.get_close_matches(leaf, [str(k) for k in known], n=1, cutoff=0.6)
    hint = f" (did you mean {(parent + '.' if parent else '') + match[0]!r}?)" if match else ""
    where = f"{parent!r} has" if parent else "the configuration has"
    return f"unknown config key {key!r}{hint}; {where}: {', '.join(map(str, known))}"


def sweep_error(config_name: str, argv: list[str], check, conf_dir: Path = CONF_DIR) -> str | None:
    """The one-line error of the first job of a multirun (``-m seed=0,abc``) that ``check`` (the entry point's check
    before any work) refuses, or None: every job's configuration is composed and checked before the first job runs,
    so a bad value late in a sweep cannot stop the sweep after earlier jobs have written their folders."""
    import itertools

    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides([a for a in argv if not a.startswith("-")])
    try:
        axes = [
            [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            if o.is_sweep_override()
            else [o.input_line]
            for o in parsed
        ]
    except (
        Exception
    ):  # a sweep only its sweeper can enumerate (interval, glob): the sweeper's jobs are checked as they run
        return None
    jobs = list(itertools.product(*axes))
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            for n, job in enumerate(jobs):
                swept = " ".join(j for j, axis in zip(job, axes) if len(axis) > 1)
                try:
                    check(compose(config_name=config_name, overrides=list(job)))
                except (*USER_ERRORS, ValueError) as exc:
                    return f"multirun job {n} of {len(jobs)} ({swept}): {_first_line(exc)}"
    finally:
        GlobalHydra.instance().clear()
    return None


def check_group_overrides(argv: list[str] | None = None, config_name: str | None = None, check=None) -> None:
    """Exit with status 2 and one line on stderr if an override names a missing config-group option or, given the
    entry point's ``config_name``, cannot be composed (an unknown key, an unreadable value); for a multirun given the
    entry point's ``check``, if any of its jobs fails that check (:func:`sweep_error`)."""
    argv = sys.argv[1:] if argv is None else argv
    msg = unknown_group_option(argv)
    if msg is None and config_name is not None:
        msg = composition_error(config_name, argv)
    if msg is None and config_name is not None and check is not None and _is_multirun(argv):
        msg = sweep_error(config_name, argv, check)
    if msg:
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(2)


def command_line_config(argv: list[str], predictor: str, output_dir: str, extra=None, yaml_files: bool = False) -> dict:
    """A standalone trainer's command line parsed once (``python -m mara.predictors.<trainer> key=value ...``):
    ``seed``, ``bank.path``, ``trainer``, ``paths.output_dir`` (default ``output_dir``) and ``extra``, with
    conf/predictor/<predictor>.yaml under ``predictor``; then the YAML files among ``argv`` (``yaml_files``), then its
    ``key=value`` pairs. -> a plain, resolved dict; a malformed pair: a one-line ConfigError."""
    base = OmegaConf.create(
        {"seed": 0, "bank": {"path": None}, "trainer": {}, "paths": {"output_dir": output_dir}, **(extra or {})}
    )
    base.predictor = OmegaConf.load(conf_dir("predictor", f"{predictor}.yaml"))
    files = [a for a in argv if yaml_files and a.endswith(".yaml")]
    try:
        for f in files:
            base = OmegaConf.merge(base, OmegaConf.load(f))
        merged = OmegaConf.merge(base, OmegaConf.from_dotlist([a for a in argv if a not in files]))
        return OmegaConf.to_container(merged, resolve=True)
    except Exception as exc:  # OmegaConf's errors span lines: the first one says what is wrong
        raise ConfigError(f"command line {' '.join(argv)!r}: {_first_line(exc)}") from None


def standalone_main(argv: list[str], parse, run) -> None:
    """A standalone command: ``parse(argv)`` once into its settings (a wrong setting: one line on stderr, exit 2),
    then ``run(settings)``; its result is printed unless None."""
    try:
        settings = parse(argv)
    except (ConfigError, ValueError, TypeError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    result = run(settings)
    if result is not None:
        print(result)
