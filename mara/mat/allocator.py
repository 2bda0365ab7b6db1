"""The MAT policy as an ``Allocator`` (docs/allocators.md): observation → masked joint action, argmax by default.
On heterogeneous nodes / with switch costs the policy's ordered picks are placed on nodes by the rules'
placement (``mara.allocators.placement.place_policy``; with the displacement move for ``placement: displace``).
A Plackett–Luce policy acts for the observation's own M and K; a policy trained across a suite of cluster sizes
(``sizes: any`` in ``read_policy_meta``) is accepted for any of them, others only for the size they were trained for
(``mara.eval.policy_fit``). A policy with a node head (``mat.net.node_head``) chooses the nodes itself there
(mara/mat/node_choice.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from mara.allocators.placement import place_policy
from mara.core.safe_load import CheckpointError, check_kind, load_checkpoint
from mara.mat import node_choice
from mara.mat.features import obs_to_tokens, token_options
from mara.mat.nets import MATPolicy, to_env_actions
from mara.sim.env import Observation


class PolicyAllocator:
    """Wrap an in-memory ``MATPolicy``; ``deterministic`` picks each node's most likely choice."""

    name = "MAT"

    def __init__(self, policy: MATPolicy, deterministic: bool = True, scale: float = 350.0, seed: int = 0) -> None:
        self.policy, self.deterministic, self.scale = policy, deterministic, scale
        self.generator = torch.Generator().manual_seed(seed)

    def reset(self, n_episodes: int) -> None:
        pass

    @torch.no_grad()
    def act(self, obs: Observation) -> np.ndarray:
        tokens, present = obs_to_tokens(
            obs, self.scale, getattr(self.policy, "features", "v1"), **token_options(self.policy)
        )
        return policy_env_actions(self.policy, obs, tokens, present, self.scale, self.deterministic, self.generator)


def policy_env_actions(
    policy: MATPolicy,
    obs: Observation,
    tokens,
    present,
    scale: float = 350.0,
    deterministic: bool = True,
    generator: torch.Generator | None = None,
) -> np.ndarray:
    """The policy's env actions [E, M] on ``obs`` (its tokens given): its picks placed by the rules' placement
    (``placement``; the identity on identical nodes with free preemption), or, for a policy with a node head on unequal
    nodes or with switch costs, placed by the head itself."""
    dev = next(policy.parameters()).device
    tokens, present = tokens.to(dev), present.to(dev)
    if getattr(policy, "node_head", False) and getattr(obs, "hetero", False):
        pairs = torch.as_tensor(node_choice.pair_features(obs, scale), device=dev)
        order = torch.as_tensor(node_choice.node_order(obs.node_speed))
        _, nodes, _, _ = policy.act_nodes(tokens, present, pairs, order, deterministic, generator)
        return to_env_actions(nodes, tokens.shape[1])
    actions, _, _ = policy.act(tokens, present, deterministic=deterministic, generator=generator, n_nodes=obs.n_nodes)
    picks = to_env_actions(actions, tokens.shape[1])
    return place_policy(obs, picks, getattr(policy, "placement", "greedy"))  # identity on identical nodes


class MATAllocator(PolicyAllocator):
    """Load a trained MAT checkpoint (a ``MATModule`` Lightning checkpoint) and act with it."""

    name = "MARA"

    def __init__(self, ckpt_path: str | None, deterministic: bool = True, seed: int = 0) -> None:
        if not ckpt_path:
            raise ValueError(
                "no trained policy checkpoint: run `python -m mara.train` (it evaluates its policy), "
                "or set +method_overrides.<METHOD>.ckpt_path=<run>/policy/checkpoints/best.ckpt"
            )
        if not Path(ckpt_path).exists():
            raise ValueError(f"policy checkpoint {ckpt_path} not found")
        ckpt = read_policy_checkpoint(ckpt_path)
        hp = ckpt["hyper_parameters"]
        try:
            policy = MATPolicy(n_slots=hp["sim"]["max_active"], n_nodes=hp["sim"]["n_nodes"], **hp["net"])
            policy.load_state_dict(policy_weights(ckpt))
        except (RuntimeError, TypeError, ValueError) as exc:  # weights that do not fit the recorded network
            why = " ".join(str(exc).split())[:120]
            raise CheckpointError(f"policy checkpoint {ckpt_path} is not a MAT policy checkpoint ({why})") from None
        policy.eval()
        super().__init__(policy, deterministic, hp["rollout"]["scale"], seed)
        self.ckpt_path, self.trained_predictor = ckpt_path, hp.get("predictor") or {}
        self.any_size = trained_sizes(hp) == "any"
        self.predictor_name = self.trained_predictor.get("name")


def trained_sizes(hp: dict) -> str:
    """``any`` for a Plackett–Luce policy trained across a suite of cluster settings (``mat.imitation.suite``), which
    acts for any M, K and node profile; else ``trained`` (only the M and K in its hparams)."""
    suite = (hp.get("imitation") or {}).get("suite")
    return "any" if suite and (hp.get("net") or {}).get("decoder") == "plackett_luce" else "trained"


def _check_policy(ckpt, path) -> dict:
    ckpt = check_kind(ckpt, path, "policy", ("hyper_parameters", "state_dict"))
    hp = ckpt["hyper_parameters"]
    ok = (
        isinstance(hp, dict)
        and isinstance(hp.get("sim"), dict)
        and isinstance(hp.get("net"), dict)
        and isinstance(hp.get("rollout"), dict)
        and {"max_active", "n_nodes"} <= hp["sim"].keys()
        and "scale" in hp["rollout"]
    )
    if not ok:
        raise CheckpointError(f"{path} is not a MAT policy checkpoint (its hyper_parameters have no sim/net/rollout)")
    return ckpt


def policy_weights(ckpt: dict) -> dict:
    """The ``MATPolicy`` state dict inside a policy checkpoint (its ``policy.*`` weights)."""
    return {k[len("policy.") :]: v for k, v in ckpt["state_dict"].items() if k.startswith("policy.")}


def read_policy_checkpoint(path, mmap: bool = False) -> dict:
    """A MAT Lightning checkpoint as a dict, loaded as data only (``weights_only=True``; ``mmap``: tensors
    memory-mapped, for reading what it records without loading its weights); a file that is not one is a one-line
    ``CheckpointError`` (a ``ConfigError``) naming it and what it is not."""
    return _check_policy(load_checkpoint(path, "policy checkpoint", mmap=mmap), path)


def read_policy_meta(path) -> dict:
    """What a policy checkpoint was trained for, read without loading its weights (tensors memory-mapped):
    ``{M, K, features, decoder, predictor, recipe}``; a file that is not a policy is a one-line ``CheckpointError``."""
    ckpt = read_policy_checkpoint(path, mmap=True)
    hp = ckpt["hyper_parameters"]
    return {
        "M": int(hp["sim"]["n_nodes"]),
        "K": int(hp["sim"]["max_active"]),
        "features": hp["net"].get("features", "v1"),
        "decoder": hp["net"].get("decoder", "autoregressive"),
        "predictor": hp.get("predictor"),
        "recipe": ckpt.get("recipe"),
        "sizes": trained_sizes(hp),
    }
