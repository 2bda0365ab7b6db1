"""Run folders: one live run per folder, resume by default, ``fresh=true`` to start over.

**Lock.** The process working in a run folder (``hydra.run.dir`` / ``paths.output_dir``) holds an advisory lock on
``<run>/.run.lock`` for the whole call: a POSIX record lock (``fcntl.lockf``), which the kernel drops when the process
ends, however it ends, and which forked workers (live mode) do not inherit, so a killed run never blocks its rerun. A
second run into a folder a live run holds is refused (one line, exit 2) rather than writing beside it: a folder's
results are read, merged and rewritten by one process at a time.

**Stages.** A pipeline stage (``<run>/predictor``, ``<run>/policy``) records the settings it depends on in
``<stage>/stage.json`` when it starts and its result when it finishes. A rerun reuses a finished stage, resumes an
unfinished one from its last checkpoint (a killed attempt's TensorBoard events are moved to ``tb/attempt_<n>/``, so
the resumed attempt's events, which continue the step axis from the checkpoint, never mix with them), and refuses
other settings before any work.

**Results.** ``results.json`` merges by method (:mod:`mara.core.results`).

**Fresh.** ``fresh=true`` moves everything the folder holds (but Hydra's ``.hydra/``, the logs and the lock) to
``<run>/superseded/<time>/`` and starts over.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from mara.core.config import ConfigError
from mara.core.runlog import log

LOCK_NAME = ".run.lock"
STAGE_FILE = "stage.json"
TB_DIRS = ("tb", "tensorboard")  # TensorBoard folders a stage or an evaluation writes into
KEEP_ON_FRESH = {".hydra", LOCK_NAME, "superseded"}

#: what each pipeline stage's product depends on (keys of the composed train config; ``sim.loads`` only sets the
#: evaluation loads, and a given ``ckpt_path`` only says where the policy stage continues from)
STAGE_SETTINGS = {
    "predictor": ("bank", "seed", "predictor", "trainer"),
    "policy": ("bank", "seed", "predictor", "trainer", "mat", "reward", "sim"),
}
IGNORED_SETTINGS = {"sim.loads"}

_held: dict[str, list] = {}  # resolved folder -> [open lock file, depth]: the lock is re-entrant within a process
_planned: dict[str, dict] = {}  # stage folder -> the settings computed from the composed config before any work


class RunFolderBusy(ConfigError):
    """The run folder is held by another live process."""


# ------------------------------------------------------------------------------------------------------- the lock
def acquire(folder: Path) -> None:
    """Hold ``folder`` for this process (re-entrant); another live holder → :class:`RunFolderBusy`."""
    folder = Path(folder)
    key = str(folder.resolve())
    if key in _held:
        _held[key][1] += 1
        return
    folder.mkdir(parents=True, exist_ok=True)
    f = open(folder / LOCK_NAME, "a+")
    try:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        holder = f.read().strip() or "another process"
        f.close()
        raise RunFolderBusy(
            f"run folder {folder} is in use by a live run ({holder}); wait for it to finish "
            f"or choose another hydra.run.dir"
        ) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(sys.argv)}\n")
    f.flush()
    _held[key] = [f, 1]


def release(folder: Path) -> None:
    """Give ``folder`` back (the outermost release unlocks it)."""
    key = str(Path(folder).resolve())
    entry = _held.get(key)
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] == 0:
        fcntl.lockf(entry[0], fcntl.LOCK_UN)
        entry[0].close()
        del _held[key]


def folder_of(cfg: DictConfig) -> Path | None:
    """The run folder ``cfg`` names (``paths.output_dir``, else Hydra's run dir); None for a folder made up on the
    fly (no Hydra, no ``paths.output_dir``: a fresh timestamped folder nobody else writes into)."""
    given = (cfg.get("paths") or {}).get("output_dir")
    if given:
        return Path(given)
    try:
        from hydra.core.hydra_config import HydraConfig

        return Path(HydraConfig.get().runtime.output_dir)
    except Exception:  # composed outside @hydra.main
        return None


def run_folder(fn=None, *, stages: tuple[str, ...] = (), check=None):
    """Decorator for an entry function ``fn(cfg)``: runs ``check(cfg)`` (the entry point's checks before any work)
    before touching the folder, then holds the run folder for the call (:func:`holding`), applies ``fresh=true``, and
    checks the recorded settings of ``stages`` (subfolders of the run) against ``cfg`` before any work."""
    if fn is None:
        return functools.partial(run_folder, stages=stages, check=check)

    @functools.wraps(fn)
    def wrapper(cfg: DictConfig, *args, **kwargs):
        if check is not None:
            check(cfg)  # a mistake stops here: nothing set aside, no lock file, no work
        folder, fresh = folder_of(cfg), bool(cfg.get("fresh", False))
        if folder is not None and fresh:
            cfg = cfg.copy()
            with open_dict(cfg):
                cfg.fresh = False  # nested entry functions (the pipeline's evaluation) find a clean folder already
        with holding(folder, fresh, {name: stage_settings(cfg, name) for name in stages}):
            return fn(cfg, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def holding(folder: Path | None, fresh: bool = False, stages: dict | None = None):
    """Hold the run folder ``folder`` for the block: one live run per folder, ``fresh`` sets its earlier products
    aside (else only an earlier attempt's TensorBoard files), and ``stages`` ({subfolder: the settings its product
    depends on}) are checked against what those subfolders recorded, before any work. ``folder`` None: nothing held
    (a folder made up on the fly, which nobody else writes into)."""
    stages = stages or {}
    if folder is None:
        yield
        return
    acquire(folder)
    try:
        if fresh:
            set_aside_all(folder)
        else:
            set_aside_events(folder)
        for name, settings in stages.items():
            plan_stage(folder / name, settings)
        yield
    finally:
        for name in stages:
            _planned.pop(str((folder / name).resolve()), None)
        release(folder)


# --------------------------------------------------------------------------------------------- setting things aside
def time_stamp() -> str:
    """The time (UTC) in a folder or file name: ``20260101-120000``."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def free_path(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``, ... the first that does not exist."""
    n, out = 1, path
    while out.exists():
        n += 1
        out = path.with_name(f"{path.name}-{n}")
    return out


def set_aside_all(folder: Path) -> Path | None:
    """``fresh=true``: move the folder's earlier products to ``<folder>/superseded/<time>/`` (nothing deleted)."""
    items = [p for p in Path(folder).iterdir() if p.name not in KEEP_ON_FRESH and p.suffix != ".log"]
    if not items:
        return None
    dest = free_path(Path(folder) / "superseded" / time_stamp())
    dest.mkdir(parents=True)
    for p in items:
        os.replace(p, dest / p.name)
    log.info(f"fresh=true: starting over; this folder's earlier products moved to {dest}")
    return dest


def set_aside_events(folder: Path) -> None:
    """Move an earlier attempt's TensorBoard files in ``folder/tb`` (``tensorboard``) to ``attempt_<n>/`` beside
    the events the new attempt writes, so the two never mix in one run."""
    for name in TB_DIRS:
        tb = Path(folder) / name
        if not tb.is_dir():
            continue
        old = [p for p in tb.iterdir() if not p.name.startswith("attempt_")]
        if not old:
            continue
        n = 1 + sum(1 for p in tb.iterdir() if p.name.startswith("attempt_"))
        dest = free_path(tb / f"attempt_{n}")
        dest.mkdir()
        for p in old:
            os.replace(p, dest / p.name)


# ------------------------------------------------------------------------------------------------------ the stages
def _flat(d, prefix: str = "") -> dict:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
    return out


def stage_settings(cfg: DictConfig, stage: str) -> dict:
    """The settings ``stage``'s product depends on, flat and JSON-plain (``{"mat.total_env_steps": 1536, ...}``)."""
    plain = {
        k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
        for k in STAGE_SETTINGS[stage]
        if k in cfg
    }
    flat = {k: v for k, v in _flat(plain).items() if k not in IGNORED_SETTINGS}
    return json.loads(json.dumps(flat, default=str))


def _read_stage(folder: Path) -> dict | None:
    path = Path(folder) / STAGE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def plan_stage(folder: Path, settings: dict) -> None:
    """Refuse (one line) a stage folder whose recorded settings differ from ``settings``; remember them for
    :func:`run_stage` (the settings of the composed config, before the pipeline fills in its own products)."""
    rec = _read_stage(folder)
    if rec is not None and rec.get("settings") != settings:
        was = rec.get("settings") or {}
        keys = sorted(k for k in set(was) | set(settings) if was.get(k) != settings.get(k))
        shown = ", ".join(f"{k}: {was.get(k)!r} → {settings.get(k)!r}" for k in keys[:3]) + (
            " ..." if len(keys) > 3 else ""
        )
        raise ConfigError(
            f"{folder} was made with other settings ({shown}); rerun with fresh=true to start over, "
            f"or choose another hydra.run.dir"
        )
    _planned[str(Path(folder).resolve())] = settings


def run_stage(folder: Path, work, cfg: DictConfig, stage: str, resume_file: str | None = None) -> dict:
    """``work(cfg)`` for the pipeline stage in ``folder``, unless it finished there with the same settings (then its
    recorded result, reused). An unfinished earlier attempt with ``resume_file`` (relative to ``folder``) on disk
    resumes from it (``cfg.ckpt_path``) unless a checkpoint is given."""

    def with_resume(ckpt: str | None) -> dict:
        if ckpt is None:
            return work(cfg)
        resumed = cfg.copy()
        with open_dict(resumed):
            resumed.ckpt_path = ckpt
        return work(resumed)

    return run_settled_stage(
        folder, with_resume, stage_settings(cfg, stage), stage, resume_file, resume_given=bool(cfg.get("ckpt_path"))
    )


def run_settled_stage(
    folder: Path, work, settings: dict, stage: str, resume_file: str | None = None, resume_given: bool = False
) -> dict:
    """``work(resume)`` for the pipeline stage in ``folder`` whose product depends on ``settings`` (the flat record
    of ``stage_settings``), unless it finished there with the same settings (then its recorded result, reused).
    ``resume``: ``folder/resume_file`` when an unfinished earlier attempt left it and no checkpoint is given
    (``resume_given``), else None."""
    folder = Path(folder)
    settings = _planned.get(str(folder.resolve())) or settings
    rec = _read_stage(folder)
    if rec is not None and rec.get("settings") == settings and rec.get("done"):
        result, used = recorded_result(folder, rec)
        log.info(
            f"resume: {stage} stage finished in this run folder, reused ({folder})"
            + (f": {', '.join(used)}" if used else "")
        )
        return result
    resume = None
    if rec is not None:  # an earlier attempt with these settings did not finish
        set_aside_events(folder)
        ckpt = folder / resume_file if resume_file else None
        if ckpt is not None and ckpt.exists() and not resume_given:
            resume = str(ckpt)
            log.info(f"resume: {stage} stage continues from {ckpt} (an earlier attempt stopped)")
        else:
            log.info(f"resume: {stage} stage of an earlier attempt did not finish; it runs again from the start")
    folder.mkdir(parents=True, exist_ok=True)
    _write_json(folder / STAGE_FILE, {"stage": stage, "settings": settings, "done": False})
    result = work(resume)
    stored, paths = relative_paths(result, folder)
    _write_json(
        folder / STAGE_FILE, {"stage": stage, "settings": settings, "done": True, "result": stored, "paths": paths}
    )
    return result


# ------------------------------------------------------------------------------------------- paths in a stage record
def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
        return True
    except ValueError:
        return False


def relative_paths(result, folder: Path, key: str = "") -> tuple:
    """(``result`` with every absolute path inside ``folder`` made relative to it, the dotted keys of those paths): a
    stage record names its own files by where they are in the folder, so a moved or copied run folder uses its own."""
    if isinstance(result, dict):
        out, keys = {}, []
        for k, v in result.items():
            out[k], sub = relative_paths(v, folder, f"{key}.{k}" if key else str(k))
            keys += sub
        return out, keys
    if isinstance(result, str) and os.path.isabs(result) and _inside(Path(result), folder):
        return Path(result).resolve().relative_to(Path(folder).resolve()).as_posix(), [key]
    return result, []


def recorded_result(folder: Path, rec: dict, record: str = STAGE_FILE) -> tuple[dict, list[str]]:
    """(a finished stage's recorded result with its paths resolved inside ``folder``, the files it names). A recorded
    path that leads outside the folder (``..``, or an absolute path elsewhere: a folder copied or moved from a version
    that recorded absolute paths) is one ConfigError line: the run would otherwise use another folder's files."""
    folder = Path(folder)
    marked = set(rec.get("paths") or [])

    def resolve(v, key: str):
        if isinstance(v, dict):
            return {k: resolve(x, f"{key}.{k}" if key else str(k)) for k, x in v.items()}
        if not isinstance(v, str) or (key not in marked and not os.path.isabs(v)):
            return v
        path = Path(v) if os.path.isabs(v) else folder / v
        if not _inside(path, folder):
            raise ConfigError(
                f"{folder / record} records {key}={v}, outside this run folder (a folder copied or "
                f"moved from elsewhere?): rerun with fresh=true to start over here, or run in the "
                f"original folder"
            )
        used.append(str(path))
        return str(path)

    used: list[str] = []
    result = resolve(rec.get("result") or {}, "")
    return result, [u for u in used if u.endswith((".ckpt", ".json"))]
