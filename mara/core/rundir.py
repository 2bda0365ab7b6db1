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

**Results.** ``results.json`` merges by method, in an evaluation folder and in a trace-replay folder alike: rows of
the methods a run does not evaluate are kept with their settings; a method the run lists is kept when its own
settings (``method_overrides`` of an evaluation, ``method_settings`` of a trace replay; checkpoint contents) are the
ones it was evaluated with (``eval.resume``, default true). Results of another protocol or bank are moved aside to
``results.superseded-<time>.json``, never silently replaced. A folder whose results are of another kind (an
evaluation's where a trace replay writes, or the reverse) is refused before any work (one line): the two kinds share
no rows, so neither run may write over the other's.

**Fresh.** ``fresh=true`` moves everything the folder holds (but Hydra's ``.hydra/``, the logs and the lock) to
``<run>/superseded/<time>/`` and starts over.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass, field
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
def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime())


def _free(path: Path) -> Path:
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
    dest = _free(Path(folder) / "superseded" / _stamp())
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
        dest = _free(tb / f"attempt_{n}")
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


# ------------------------------------------------------------------------------------------------------ the results
RESULT_NEUTRAL_KEYS = ("workers",)  # method settings that change how fast a method runs, not its rows


def _neutral(overrides: dict) -> dict:
    """Per-method overrides without the settings that cannot change the rows (and without empty entries)."""
    kept = {m: {k: v for k, v in (o or {}).items() if k not in RESULT_NEUTRAL_KEYS} for m, o in overrides.items()}
    return {m: o for m, o in kept.items() if o}


def _paths_in(x) -> list[str]:
    if isinstance(x, dict):
        return [p for k, v in x.items() for p in ([v] if k == "ckpt_path" and isinstance(v, str) else _paths_in(v))]
    if isinstance(x, list):
        return [p for v in x for p in _paths_in(v)]
    return []


def checkpoint_digests(overrides: dict) -> dict:
    """{method: {checkpoint path: sha256 prefix}} of every ``ckpt_path`` in the methods' overrides: a method's rows
    depend on what its checkpoints hold, not only on their paths."""
    out = {}
    for m, o in overrides.items():
        files = [p for p in _paths_in(o) if Path(p).is_file()]
        if files:
            out[m] = {p: hashlib.sha256(Path(p).read_bytes()).hexdigest()[:16] for p in files}
    return out


@dataclass
class EarlierResults:
    """What a folder's ``results.json`` already holds, split for this run: ``done`` ({method: rows}) are this run's
    methods evaluated with their present settings (reused); ``other`` rows belong to methods this run does not list
    (kept as they are, with their settings and notes)."""

    done: dict = field(default_factory=dict)
    other: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)
    digests: dict = field(default_factory=dict)
    notes: dict = field(default_factory=lambda: {"skipped": {}, "failed": {}})

    def merged(self, rows: list, skipped: dict, failed: dict, overrides: dict, digests: dict) -> dict:
        """This run's rows and notes merged with the other methods' (results.json fields)."""
        return {
            "rows": self.other + rows,
            "method_overrides": {**self.overrides, **overrides},
            "checkpoint_digests": {**self.digests, **digests},
            "skipped": {**self.notes["skipped"], **skipped},
            "failed": {**self.notes["failed"], **failed},
        }


#: the kind of run a results.json holds: its ``kind`` field (a trace replay writes ``trace``); an evaluation's file
#: (``schema: mara.results/1``, the prediction benchmark's sections) has none
RESULT_KINDS = {"trace": "a trace replay", "evaluation": "an evaluation"}


def results_kind(path: Path) -> str | None:
    """The kind of run whose results ``path`` holds (a key of :data:`RESULT_KINDS`); None for no file or one that
    cannot be read (which the merge moves aside)."""
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return str(old.get("kind") or "evaluation") if isinstance(old, dict) else None


def refuse_other_results(folder: Path | None, kind: str) -> None:
    """A one-line ConfigError when ``folder``'s results.json holds another kind of run's results than ``kind``: a
    run of one kind never writes over the other's rows (``fresh=true`` sets them aside first)."""
    if folder is None:
        return
    have = results_kind(Path(folder) / "results.json")
    if have is not None and have != kind:
        raise ConfigError(
            f"{Path(folder) / 'results.json'} holds the results of {RESULT_KINDS.get(have, repr(have))}, which "
            f"{RESULT_KINDS[kind]} would write over: choose another hydra.run.dir, or rerun with fresh=true to move "
            f"that folder's products aside first"
        )


def earlier_results(
    path: Path,
    base: dict,
    methods: list[str],
    resume: bool = True,
    kind: str = "evaluation",
    settings_key: str = "method_overrides",
) -> EarlierResults:
    """Read ``path`` (results.json) for a run of ``methods`` whose protocol/bank/method settings are ``base`` (see
    :class:`EarlierResults`; ``settings_key``: the field of ``base`` and of the file that holds each method's own
    settings). A file of another protocol or bank is moved aside (a warning names where); a file of another ``kind``
    of run is refused (:func:`refuse_other_results`)."""
    path = Path(path)
    if not path.exists():
        return EarlierResults()
    refuse_other_results(path.parent, kind)
    try:
        old = json.loads(path.read_text())
    except ValueError:
        old = None
    differ = (
        ["unreadable file"]
        if old is None
        else [k for k in base if k != settings_key and old.get(k) != json.loads(json.dumps(base[k], default=str))]
    )
    if differ:
        stamp = _stamp()
        for p in (path, path.with_suffix(".md")):
            if p.exists():
                os.replace(p, _free(p.with_name(f"{p.stem}.superseded-{stamp}{p.suffix}")))
        log.warning(
            f"{path} was written with another {', '.join(differ)}: moved aside to "
            f"{path.stem}.superseded-{stamp}.json; evaluating every method anew"
        )
        return EarlierResults()
    was_over = old.get(settings_key) or {}
    was, now = _neutral(was_over), _neutral(json.loads(json.dumps(base[settings_key], default=str)))
    was_dig, now_dig = old.get("checkpoint_digests"), checkpoint_digests(base[settings_key])
    out = EarlierResults()
    for r in old.get("rows", []):
        m = r["method"]
        if m not in methods:
            out.other.append(r)
        elif resume and was.get(m) == now.get(m) and (was_dig is None or was_dig.get(m) == now_dig.get(m)):
            out.done.setdefault(m, []).append(r)  # a method's rows depend on its own settings
    others = {r["method"] for r in out.other}
    out.overrides = {m: o for m, o in was_over.items() if m in others}
    out.digests = {m: d for m, d in (was_dig or {}).items() if m in others}
    for kind in ("skipped", "failed"):
        out.notes[kind] = {m: why for m, why in (old.get(kind) or {}).items() if m not in methods}
    rerun = sorted({r["method"] for r in old.get("rows", []) if r["method"] in methods} - set(out.done))
    if rerun:
        why = "method settings or checkpoints changed" if resume else "eval.resume=false"
        log.warning(f"{', '.join(rerun)} evaluated anew ({why}); their earlier rows replaced")
    if out.done or others:
        log.info(
            f"resume: {path} keeps {', '.join(sorted(set(out.done) | others))}"
            + (f" ({', '.join(sorted(out.done))} not evaluated again)" if out.done else "")
        )
    return out
