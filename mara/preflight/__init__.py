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

from omegaconf import DictConfig, ListConfig, OmegaConf

from mara.core.config import SHIPPED_LIVE_POLICY, ConfigError, plain_config, with_shipped_policies
from mara.eval.runner import node_options
from mara.eval.settings import trace_job_settings
from mara.mat.train import checkpoint_method, with_run_policy
from mara.preflight.checkpoints import (
    check_cal_banks,
    check_checkpoints,
    check_stage_inputs,
    read_policy,
    read_predictor_checkpoint,
)
from mara.preflight.common import _bank_path, check_writable, closest, run_folder
from mara.preflight.methods import (
    check_engine,
    check_live_predictors,
    check_live_workers,
    check_method_names,
    check_method_override,
    check_methods,
    check_once,
    check_teachers,
)
from mara.preflight.numbers import check_numbers, check_sizes
from mara.train_settings import trained_method

__all__ = [
    "check_method_override",
    "check_writable",
    "closest",
    "preflight",
    "read_policy",
    "read_predictor_checkpoint",
]


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
