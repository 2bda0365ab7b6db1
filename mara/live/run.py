"""Live mode end to end: config → live episodes per method → recorded curves → replay → report (``live_main``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from mara.core.cli import output_dir
from mara.core.config import (
    SHIPPED_LIVE_POLICY,
    ConfigError,
    build_allocators,
    load_method_cfg,
    plain_config,
)
from mara.core.rundir import run_folder
from mara.curves.bank import load_bank, shipped_bank_path, write_bank
from mara.curves.families import generation_cap
from mara.eval.policy_fit import check_policy_fit
from mara.eval.runner import node_options
from mara.eval.settings import bank_at
from mara.live.driver import replay, run_live
from mara.live.episode import live_tasks, scaled_family_params
from mara.live.jobs import run_jobs
from mara.live.pools import make_pool, pool_options
from mara.live.progress import say_worker_failures, step_reporter, tensorboard_writer
from mara.live.ray_pool import check_ray_cluster
from mara.live.report import say, write_report
from mara.live.settings import LiveOptions, LiveSettings, live_settings
from mara.live.workers import preload_datasets
from mara.predictors.factory import predictor_from
from mara.preflight import preflight

LIVE_BANK = "live_curves.parquet"
#: MARA policy shipped for the live defaults (M = 2, K = 4, T = 120, budgets x 0.25); see docs/live.md
SHIPPED_POLICY = SHIPPED_LIVE_POLICY


def validate(cfg: DictConfig) -> None:
    """One-line errors for impossible live settings (before any work)."""
    from tasks_zoo.registry import known_families

    sim, lv = cfg.sim, cfg.live
    if int(sim.nodes) < 1:
        raise ConfigError(f"sim.nodes (M) must be >= 1, got {sim.nodes}")
    if int(sim.max_active) < 1:
        raise ConfigError(f"sim.max_active (K) must be >= 1, got {sim.max_active}")
    if int(sim.steps) < 1:
        raise ConfigError(f"sim.steps (T) must be >= 1, got {sim.steps}")
    if int(sim.get("obs_every", 10)) < 1:
        raise ConfigError(f"sim.obs_every must be >= 1, got {sim.obs_every}")
    node_options(sim)  # node speeds and switch costs, checked as the simulator checks them
    if not 0.0 <= float(lv.load) <= 1.0:
        raise ConfigError(f"live.load: arrival probability p must lie in [0, 1], got {lv.load}")
    if int(lv.episodes) < 1:
        raise ConfigError(f"live.episodes must be >= 1, got {lv.episodes}")
    fams = list(lv.families)
    unknown = [f for f in fams if f not in known_families()]
    if not fams or unknown:
        raise ConfigError(
            f"live.families: unknown famil{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown) or '(none given)'} "
            f"(known: {', '.join(known_families())})"
        )
    if lv.data not in ("real", "synthetic"):
        raise ConfigError(f"live.data must be real or synthetic, got {lv.data!r}")
    if lv.workers not in ("process", "inline", "ray"):
        raise ConfigError(f"live.workers must be process, inline or ray, got {lv.workers!r}")


def resolve_data(lv: LiveOptions, specs_families) -> tuple[str, str | None]:
    """(source, fallback note): real data when ``data_root`` has it for every family, else synthetic, flagged."""
    from tasks_zoo.errors import ZooError
    from tasks_zoo.registry import load_dataset, load_zoo_config

    if lv.data == "synthetic":
        return "synthetic", None
    try:
        for fam in specs_families:
            load_dataset(load_zoo_config(fam).dataset, "real", lv.data_root, lv.cache_dir, False)
    except ZooError as exc:
        return "synthetic", f"real data unavailable ({exc}); running on synthetic stand-ins (data=synthetic)"
    return "real", None


def build_method(name: str, run: LiveSettings, predictors: dict, bank_path):
    """(allocator factory, predictor) of a policy method, or (None, reason) when it cannot run live."""

    mcfg = load_method_cfg(name, run.method_overrides.get(name))
    if name == "MARA" and not mcfg.get("ckpt_path") and not mcfg.get("checkpoints"):
        ckpt = run.live.policy_ckpt or (SHIPPED_POLICY if SHIPPED_POLICY.exists() else None)
        if ckpt:
            mcfg.ckpt_path = str(ckpt)
    if mcfg.kind != "policy":
        return None, f"{name} is a bound (kind: {mcfg.kind}), not a schedule; skipped in live mode"
    alloc_spec = mcfg.get("allocator", {})
    if (
        str(alloc_spec.get("_target_", "")).endswith("MATAllocator")
        and not mcfg.get("ckpt_path")
        and not mcfg.get("checkpoints")
    ):
        return None, (
            f"{name} skipped: no policy checkpoint; train one for these sim settings "
            f"(docs: README 'Live mode') and pass '++method_overrides={{{name}: {{ckpt_path: ...}}}}'"
        )
    _, first = build_allocators(mcfg)[0]  # fails with one line if the checkpoint does not load
    check_policy_fit(mcfg, [first], run.sim)
    predictor = predictor_from(mcfg.get("predictor"), bank_path, configured=run.predictors, built=predictors)
    return (lambda: build_allocators(mcfg)[0][1]), predictor


def method_plans(methods, run: LiveSettings, bank_path, notes: list[str]) -> list[tuple]:
    """(name, allocator factory, predictor) of every method that can run live, predictors built once; each method that
    cannot is one note (said and appended to ``notes``). None can: a one-line ConfigError."""
    predictors, plans = {}, []
    for m in methods:
        factory, predictor = build_method(m, run, predictors, bank_path)
        if factory is None:
            say(f"note: {predictor}")
            notes.append(predictor)
            continue
        plans.append((m, factory, predictor))
    if not plans:
        raise ConfigError("no method can run live (see the notes above)")
    return plans


def calibration_bank(lv: LiveOptions, fams, source: str):
    """The bank whose pool curves set the live ε of ``fams`` (``None``: the recipe bank itself).

    ``live.calibration_bank``: ``auto`` takes the shipped real-data curves (``live_real``) when the jobs train on
    real data and those curves cover every family; ``null`` the recipe bank; a name or path that bank.
    """

    cal = lv.calibration_bank
    if cal == "auto":
        real = shipped_bank_path("live_real")
        if source != "real" or not real.exists():
            return None
        real_bank = load_bank(real)  # read once: checked for coverage and returned
        return real_bank if all(len(real_bank.rows(f, "pool")) for f in fams) else None
    if not cal:
        return None
    cal_bank = load_bank(shipped_bank_path(cal))
    cal_bank.require_families(fams, "pool", context="live.calibration_bank")
    return cal_bank


def display_path(path) -> str:
    """``path`` relative to the working directory when it lies below it (README tables stay machine-independent)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


def export_bank(run: LiveSettings, bank, out: Path) -> Path:
    """The bank with every family's ε/budget scaled as in live mode (to train a MARA policy for live settings)."""
    import pyarrow.parquet as pq

    lv = run.live
    table = scaled_family_params(bank, bank.families, lv.time_scale, lv.calibration_target)
    # the same calibration bank a live run with these settings uses (auto: real data -> live_real), so the policy
    # trains on the ε a live run will set
    fams = [f for f in lv.families if f in bank.families]  # in live.families' order, as a live run calibrates
    cal = calibration_bank(lv, fams, lv.data)
    if cal is not None:
        table |= scaled_family_params(cal, fams, lv.time_scale, lv.calibration_target, base=bank.family_params)
        say(f"ε of {', '.join(fams)} calibrated on {display_path(cal.path)}")
    meta = dict(bank.bank_meta) | {
        "family_params": table,
        "live_time_scale": lv.time_scale,
        "scaled_from": str(bank.path),
    }
    path = Path(run.bank_out or out / "live_bank.parquet")
    # every curve cut at the live cap (twice the scaled largest budget, as live_tasks sets it): the simulator takes a
    # task's cap from its curve's length, and a cold task's predicted remaining batches is its cap_remaining, so a
    # policy trained on full-length curves would meet cold tasks in live mode it never saw in training
    records = pq.read_table(bank.path).to_pylist()
    for r in records:
        r["losses"] = r["losses"][: generation_cap(r["family"], table)]
    write_bank(path, records, meta)
    say(
        f"wrote {path} (budgets x {lv.time_scale}, ε re-calibrated to {lv.calibration_target:.0%} "
        "feasibility, "
        f"curves cut at the live cap)"
    )
    return path


def _before_any_work(cfg: DictConfig) -> None:
    settings_of(cfg)
    validate(cfg)
    preflight(cfg, "live")
    if cfg.live.workers == "ray":  # reachable, with the resources the jobs reserve (joins the cluster for the run)
        r = cfg.live.ray
        check_ray_cluster(
            r.address, r.cpus_per_job, r.gpus_per_job, int(cfg.sim.max_active), r.get("num_cpus"), r.get("num_gpus")
        )


def settings_of(cfg: DictConfig) -> LiveSettings:
    """The one reading of live mode's config: the settings it uses, as plain data, typed."""
    keys = ("action", "methods", "method_overrides", "sim", "live", "predictors", "bank", "jobs", "jobs_methods")
    return live_settings({k: plain_config(cfg.get(k)) for k in (*keys, "jobs_bank_split", "bank_out") if k in cfg})


@run_folder(check=_before_any_work)  # one live run per folder
def live_main(cfg: DictConfig) -> dict:
    """Run ``cfg.action``; returns the results dict (run) or the exported bank path."""

    run = settings_of(cfg)
    if run.jobs:  # a user's job file instead of the zoo workload (mara/live/jobs.py)
        return run_jobs(run, output_dir(cfg), method_plans)
    out = output_dir(cfg)
    bank = bank_at(run.bank_path)
    if run.action == "export_bank":
        return {"bank": str(export_bank(run, bank, out))}
    return run_live_methods(run, bank, out)


def _hetero_note(sim: dict) -> str:
    """ ", node speeds [...] (sleep factor s_max / s), switch cost c" for the start line; empty on identical nodes."""
    opts = node_options(sim)
    if opts["node_speed"] is None and opts["switch_cost"] == 0:
        return ""
    speed = [1] * int(sim["nodes"]) if opts["node_speed"] is None else opts["node_speed"].tolist()
    return f", node speeds {speed} (sleep factor s_max / s), switch cost {opts['switch_cost']}"


def run_live_methods(run: LiveSettings, bank, out: Path) -> dict:
    """Every method of ``run`` on the live episodes, each replayed in the simulator; writes the report into ``out``."""
    lv, sim = run.live, dict(run.sim)
    fams = list(lv.families)
    methods = list(run.methods)
    for m in methods:
        load_method_cfg(m)  # unknown names fail before any work
    bank.require_families(fams, "pool", context="live.families")
    source, note = resolve_data(lv, fams)
    if note:
        say(f"note: {note}")
    cal_bank = calibration_bank(lv, fams, source) or bank
    table = scaled_family_params(
        cal_bank, fams, float(lv.time_scale), float(lv.calibration_target), base=bank.family_params
    )
    episodes = live_tasks(
        bank,
        table,
        fams,
        float(lv.load),
        int(lv.root),
        int(sim["steps"]),
        int(lv.episodes),
        source,
        str(lv.data_root),
        str(lv.cache_dir),
    )
    preload_datasets([s for _, specs in episodes for s in specs])
    notes = [note] if note else []
    plans = method_plans(methods, run, bank.path, notes)
    pool_opts = pool_options(lv.device, lv.threads, dict(lv.crash), dict(lv.ray))
    n_jobs = sum(len(t) for t, _ in episodes)
    say(
        f"live: {', '.join(m for m, _, _ in plans)} on {len(episodes)} episode(s), {n_jobs} jobs of {', '.join(fams)} "
        f"({source} data), M={sim['nodes']} nodes, K={sim['max_active']}, T={sim['steps']}, p={lv.load}, "
        f"root={lv.root}, "
        f"workers={lv.workers}{_hetero_note(sim)} -> {out}"
    )
    tb = tensorboard_writer(bool(lv.tensorboard), out)
    runs = []
    for m, factory, predictor in plans:
        for e, (tasks, specs) in enumerate(episodes):
            pool = make_pool(str(lv.workers), **pool_opts)
            progress = step_reporter(f"{m} ep{e}", int(lv.progress_every), tb, f"{m}/episode{e}")
            meta = {"task_set": ["live"], "load": [float(lv.load)], "root": [int(lv.root)], "episode": [e]}
            res = run_live(tasks, specs, factory(), pool, sim, predictor, meta, progress)
            say_worker_failures(f"{m} episode {e}", res["worker_failures"])
            runs.append({"method": m, "episode": e, **res})
    if tb is not None:
        for r in runs:
            tag = f"{r['method']}/episode{r['episode']}"
            for k in ("success_rate", "utilization", "wall_s", "alloc_ms_per_step"):
                if r[k] is not None:
                    tb.add_scalar(f"summary/{tag}/{k}", r[k], 0)
        tb.close()
    records = _bank_records(runs, episodes, int(lv.root), source)
    bank_path = out / LIVE_BANK
    if records:
        write_bank(bank_path, records, {"generator": "mara.live", "family_params": table, "data": source})
    if lv.replay and records:
        _replay_from_bank(runs, episodes, load_bank(bank_path), plans, sim, float(lv.load), int(lv.root))
    res = write_report(
        run, out, runs, episodes, table, source, notes, bank_path if records else None, display_path(cal_bank.path)
    )
    return res


def _bank_records(runs: list[dict], episodes, root: int, source: str) -> list[dict]:
    """Every job's per-batch losses as curve-bank rows (``data_source=live``)."""
    records = []
    for r in runs:
        tasks, specs = episodes[r["episode"]]
        for j, losses in enumerate(r["losses"]):
            if not losses:
                continue
            t, s = tasks[j], specs[j]
            records.append(
                {
                    "curve_id": f"live/{r['method']}/root{root}/ep{r['episode']}/job{j:03d}",
                    "family": s.family,
                    "split": "pool",
                    "data_source": "live",
                    "batch_size": s.batch_size,
                    "lr": s.lr,
                    "seed": s.seed,
                    "losses": losses,
                    "meta": {
                        "data": source,
                        "method": r["method"],
                        "episode": r["episode"],
                        "job": j,
                        "arrival": t["arrival"],
                        "budget": t["budget"],
                        "eps": t["eps"],
                        "cap": t["cap"],
                        "recipe_row": t["recipe_row"],
                    },
                }
            )
    return records


def _replay_from_bank(runs: list[dict], episodes, recorded, plans, sim: dict, load: float, root: int) -> None:
    """Replay every run in the batched simulator on the losses as the written bank holds them (read back through the
    bank loader, which validates them); each run gets its ``replay``."""
    import json

    by_key = {}
    for i in range(len(recorded)):
        mt = json.loads(recorded.meta[i])
        by_key[(mt["method"], mt["episode"], mt["job"])] = recorded.ell[i, : recorded.lengths[i]].tolist()
    factories = {m: (f, p) for m, f, p in plans}
    for r in runs:
        tasks, _ = episodes[r["episode"]]
        losses = [by_key.get((r["method"], r["episode"], j), []) for j in range(len(tasks))]
        f, p = factories[r["method"]]
        meta = {"task_set": ["live"], "load": [load], "root": [root], "episode": [r["episode"]]}
        r["replay"] = replay(tasks, losses, f(), sim, p, meta)
