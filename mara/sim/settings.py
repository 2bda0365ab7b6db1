"""The simulator's settings (``sim.*``), parsed once and shared by the evaluation and the policy's training.

``SimSettings.from_cfg(sim)`` checks a ``sim`` config node (one-line ``ConfigError`` for an impossible value) and
returns the frozen settings; ``check_number`` and ``node_options`` are the checks it is made of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from mara.core.config import ConfigError, plain_config
from mara.sim.nodes import check_node_options

ENGINES = ("batched", "replay")  # BatchedEnv (mara/sim/env.py) | the trace replay (mara/traces/paper_setting.py)


def check_number(where: str, value, kind=float):
    """``kind(value)``, or a one-line ConfigError naming the setting (``sim.loads=[0.04,abc]``)."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(f"{where} must be a number, got {value!r}")
    try:
        out = kind(value)
        finite = math.isfinite(float(value))
    except (TypeError, ValueError, OverflowError):  # not a number, or an integer asked of NaN / infinity
        raise ConfigError(f"{where} must be {'an integer' if kind is int else 'a number'}, got {value!r}") from None
    if not finite:  # NaN passes every range comparison; infinity is no size
        raise ConfigError(f"{where} must be a finite number, got {value!r}")
    if kind is int and float(value) != out:
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    return out


def node_options(sim) -> dict:
    """``{node_speed, switch_cost}`` for ``BatchedEnv`` from a ``sim`` mapping (absent = identical nodes, free
    preemption), checked: one-line ConfigError for a wrong length, a non-positive speed, a negative cost."""
    speed = plain_config(sim.get("node_speed"))
    cost = sim.get("switch_cost", 0)
    try:
        speed, cost = check_node_options(
            speed, 0 if cost is None else cost, int(sim.get("nodes", 7)), int(sim.get("obs_every", 10))
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return {"node_speed": speed, "switch_cost": cost}


def validate_sim_cfg(sim) -> None:
    """One-line errors for impossible simulator settings (non-numbers included)."""
    loads = sim.loads
    if isinstance(loads, (str, int, float)) or loads is None:
        raise ConfigError(f"sim.loads must be a list of arrival probabilities, got {loads!r}")
    if len(loads) == 0:
        raise ConfigError("sim.loads must name at least one arrival probability")
    for p in loads:
        if not 0.0 <= check_number("sim.loads", p) <= 1.0:
            raise ConfigError(f"sim.loads: arrival probability p must lie in [0, 1], got {p}")
    for key in ("nodes", "max_active", "steps", "obs_every"):
        if key in sim and check_number(f"sim.{key}", sim[key], int) < 1:
            raise ConfigError(f"sim.{key} must be >= 1, got {sim[key]}")
    if "beta" in sim:
        check_number("sim.beta", sim.beta)
    q = sim.get("queue_capacity")
    if q is not None and check_number("sim.queue_capacity", q, int) < 0:
        raise ConfigError(f"sim.queue_capacity must be null or >= 0, got {q}")
    node_options(sim)
    engine = sim.get("engine", "batched")
    if engine not in ENGINES:
        raise ConfigError(f"sim.engine must be one of {', '.join(ENGINES)}, got {engine!r}")


@dataclass(frozen=True)
class SimSettings:
    """The simulator (``sim.*``): M nodes, K admission slots, T arrival steps, observation period, loads p,
    waiting-queue bound Q (None: unbounded), node speeds (None: all 1), switch cost, the training reward's shaping
    coefficient β and the engine that steps the evaluation's policies (``batched``: BatchedEnv; ``replay``: the trace
    simulator, docs/traces.md "One simulator"), as configured."""

    nodes: int = 7
    max_active: int = 10
    steps: int = 500
    obs_every: int = 10
    loads: tuple[float, ...] = (0.04, 0.05, 0.06, 0.07)
    queue_capacity: int | None = None
    node_speed: tuple | None = None
    switch_cost: Any = 0
    beta: float = 0.1
    engine: str = "batched"

    @classmethod
    def from_cfg(cls, sim) -> "SimSettings":
        """Checked settings of a ``sim`` config node (one-line ConfigError otherwise)."""
        validate_sim_cfg(sim)
        speed, q = plain_config(sim.get("node_speed")), sim.get("queue_capacity")
        return cls(
            nodes=int(sim.nodes),
            max_active=int(sim.max_active),
            steps=int(sim.steps),
            obs_every=int(sim.get("obs_every", 10)),
            loads=tuple(float(x) for x in sim.loads),
            queue_capacity=None if q is None else int(q),
            node_speed=None if speed is None else tuple(speed),
            switch_cost=sim.get("switch_cost", 0),
            beta=float(sim.get("beta", 0.1)),
            engine=str(sim.get("engine", "batched")),
        )

    def node_options(self) -> dict:
        """``{node_speed [M] int64 or None, switch_cost int}`` as ``BatchedEnv`` takes them."""
        return node_options(
            {
                "node_speed": self.node_speed,
                "switch_cost": self.switch_cost,
                "nodes": self.nodes,
                "obs_every": self.obs_every,
            }
        )

    @property
    def hetero(self) -> bool:
        """Heterogeneous node speeds or a switch cost (the shipped policies were trained without either)."""
        opts = self.node_options()
        return opts["node_speed"] is not None or opts["switch_cost"] > 0

    def env_options(self) -> dict:
        """``{node_speed [M] list, switch_cost}`` for ``BatchedEnv`` / ``TrainingEnv``; {} on identical nodes with free
        preemption (what a policy's training passes, so identical-node runs build the paper's envs)."""
        opts = self.node_options()
        speed, cost = opts["node_speed"], int(opts["switch_cost"] or 0)
        return (
            {}
            if speed is None and not cost
            else {"node_speed": None if speed is None else [int(x) for x in speed], "switch_cost": cost}
        )

    def recorded(self) -> dict:
        """The cluster as a policy checkpoint records it (``hyper_parameters.sim``): node speeds and switch cost only
        when set, so identical-node policies keep the paper's record."""
        opts = self.env_options()
        out = {
            "n_nodes": self.nodes,
            "max_active": self.max_active,
            "obs_every": self.obs_every,
            "n_steps": self.steps,
            "beta": self.beta,
        }
        if opts.get("node_speed") is not None:
            out["node_speed"] = opts["node_speed"]
        if opts.get("switch_cost"):
            out["switch_cost"] = opts["switch_cost"]
        return out
