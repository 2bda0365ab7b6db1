"""Whether a learned method's trained policies fit a run: the one check, made before any work (``mara.preflight``),
at run time (``mara.eval.runner``) and in live mode."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from mara.core.config import (
    ConfigError,
    available_methods,
    check_predictor_allowed,
    is_learned,
    load_method_cfg,
    plain_config,
)
from mara.mat.allocator import trained_sizes
from mara.predictors.factory import trained_predictor_mismatch


@dataclass
class PolicyFacts:
    """What a trained policy was made for: the predictor its tokens read, the M nodes and K slots of its nets."""

    path: str
    predictor: dict
    n_nodes: int
    max_active: int
    features: str
    any_size: bool = False  # trained across cluster sizes (mat.imitation.suite): acts for any M and K


def policy_facts(policy) -> PolicyFacts | None:
    """``PolicyFacts`` of a loaded MAT allocator or of a policy checkpoint dict; None for anything else (rules)."""
    if isinstance(policy, dict) and "hyper_parameters" in policy:
        hp = policy["hyper_parameters"]
        return PolicyFacts(
            str(policy.get("path", "?")),
            plain_config(hp.get("predictor")) or {},
            int(hp["sim"]["n_nodes"]),
            int(hp["sim"]["max_active"]),
            str((hp.get("net") or {}).get("features", "v1")),
            trained_sizes(plain_config(hp)) == "any",
        )
    net = getattr(policy, "policy", None)
    if net is None or not hasattr(net, "M"):
        return None
    return PolicyFacts(
        str(getattr(policy, "ckpt_path", "?")),
        getattr(policy, "trained_predictor", None) or {},
        int(net.M),
        int(net.K),
        str(getattr(net, "features", "v1")),
        bool(getattr(policy, "any_size", False)),
    )


def _get(sim, key: str):
    """A simulator setting of ``sim``: a mapping (a config's ``sim`` block) or typed settings (``SimSettings``)."""
    return sim[key] if hasattr(sim, "keys") else getattr(sim, key)


def check_policy_fit(mcfg: Mapping, policies, sim=None) -> None:
    """The one check that a learned method's policies fit the run, before any work, at run time and in live mode:
    never the privileged predictor; trained with the method's predictor (its tokens are that predictor's estimates
    and band); for the run's M nodes and K slots (its nets' sizes). One-line ConfigError naming what fits."""
    check_predictor_allowed(mcfg)
    for policy in policies:
        facts = policy_facts(policy)
        if facts is None:
            continue
        why = trained_predictor_mismatch(facts.predictor, mcfg.get("predictor"))
        if why:
            fits = [
                m
                for m in available_methods()
                if is_learned(c := load_method_cfg(m))
                and trained_predictor_mismatch(facts.predictor, c.get("predictor")) is None
            ]
            raise ConfigError(
                f"method {mcfg.name!r}: policy {facts.path}: {why}; evaluate it "
                f"under a method with that predictor ({', '.join(fits) or 'none configured'}) or set "
                f"+method_overrides.{mcfg.name}.predictor=<name>"
            )
        if (
            sim is not None
            and not facts.any_size
            and (facts.n_nodes, facts.max_active) != (int(_get(sim, "nodes")), int(_get(sim, "max_active")))
        ):
            raise ConfigError(
                f"method {mcfg.name!r}: policy {facts.path} was trained for M={facts.n_nodes}, "
                f"K={facts.max_active}; this run has sim.nodes={_get(sim, 'nodes')}, "
                f"sim.max_active={_get(sim, 'max_active')} "
                f"(train one for these settings, set them to the policy's, or use a policy trained across "
                f"sizes: MARA-suite, python -m mara.train experiment=suite)"
            )
