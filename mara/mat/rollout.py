"""Rollout collection: the training environment stream and the rollout buffer (plain classes).

Shapes: ``[T, E]`` rollout steps × episodes; tokens ``[T, E, K, F]``; actions ``[T, E, M]`` (0..K, K = idle).
The environment steps E episodes in a few staggered lockstep groups; episodes that finish early are masked out
(``live``) until every episode of their group is done, then a fresh batch of randomised episodes replaces the group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mara.allocators.placement import place_policy
from mara.allocators.rules import FIFO
from mara.core.safe_load import CheckpointError, from_plain, to_plain
from mara.mat import node_choice
from mara.mat.features import obs_to_tokens, token_options
from mara.mat.nets import MATPolicy, to_env_actions
from mara.sim.env import BatchedEnv, Observation
from mara.sim.estimates import step_envs
from mara.sim.workload import PAPER_TASK_SETS, EpisodeBatch, generate_episodes

_NOT_STATE = ("bank", "predictor", "episode_stream", "fm_cache")
_STATE_CLASSES = (EpisodeBatch, Observation)  # the only objects a training state may rebuild (safe_load.from_plain)


def batch_load(load, counter: int) -> float:
    """The load of episode batch ``counter``: ``load`` itself, or for a list of loads (mixed-load training,
    the loads of the paper's protocol) the list cycled batch by batch, so every load gets the same share of episodes."""
    if isinstance(load, (int, float)):
        return float(load)
    loads = [float(x) for x in load]
    return loads[counter % len(loads)]


class EpisodeStream:
    """Endless randomised training workloads: batch j of rank r uses episodes ((j·W + r)·E …) of one root."""

    def __init__(
        self,
        bank,
        family_params,
        task_set: str,
        load: float,
        root: int,
        n_episodes: int,
        rank: int = 0,
        world_size: int = 1,
        n_steps: int = 500,
    ) -> None:
        self.bank, self.family_params = bank, family_params
        self.task_set, self.load, self.root, self.E = PAPER_TASK_SETS[task_set], load, root, n_episodes
        self.rank, self.world_size, self.n_steps = rank, world_size, n_steps
        self.counter = 0

    def next(self, n: int | None = None):
        """The next ``n`` (≤ E) episodes; every call uses a fresh block of E episode indices."""
        offset = (self.counter * self.world_size + self.rank) * self.E
        load = batch_load(self.load, self.counter)
        self.counter += 1
        return generate_episodes(
            self.bank,
            self.family_params,
            self.task_set,
            load,
            self.root,
            n or self.E,
            n_steps=self.n_steps,
            episode_offset=offset,
        )


class TrainingEnv:
    """``n_groups`` BatchedEnvs of ``E / n_groups`` episodes each, staggered so that one rollout mixes episode phases.

    A group is replaced by a fresh batch once all of its episodes are done; until then its finished episodes are
    masked (``live``). At start, group g is advanced ``g · stagger`` steps with FIFO (not training data, not counted).
    """

    def __init__(
        self,
        episode_stream: EpisodeStream,
        bank,
        predictor=None,
        reward: str = "dense",
        beta: float = 0.1,
        n_nodes: int = 7,
        max_active: int = 10,
        obs_every: int = 10,
        n_groups: int = 1,
        stagger: int = 0,
        fm_cache=None,
        node_speed=None,
        switch_cost: int = 0,
    ) -> None:
        if reward not in ("dense", "sparse"):
            raise ValueError(f"mat.reward must be 'dense' or 'sparse', got {reward!r}")
        if episode_stream.E % n_groups:
            raise ValueError(
                f"rollout.n_episodes ({episode_stream.E}) must be divisible by rollout.n_groups ({n_groups})"
            )
        self.episode_stream, self.bank, self.predictor = episode_stream, bank, predictor
        self.fm_cache = (
            fm_cache  # a FlowSampleCache shared by every group (and by other envs on the same bank/predictor)
        )
        self.reward, self.beta, self.n_groups = reward, beta, n_groups
        self.n_nodes = n_nodes
        self.env_kwargs = dict(n_nodes=n_nodes, max_active=max_active, obs_every=obs_every)  # BatchedEnv arguments
        if node_speed is not None or switch_cost:  # heterogeneous nodes / switch costs (else the paper's nodes)
            self.env_kwargs.update(node_speed=node_speed, switch_cost=switch_cost)
        self.env_steps = 0  # live steps of this rank
        self.finished_success: list[float] = []  # episodes completed since the last ``pop_finished``
        self.finished_return: list[float] = []
        self.envs, self.group_obs, self.ep_return = [None] * n_groups, [None] * n_groups, [None] * n_groups
        for g in range(n_groups):
            self.new_batch(g)
            for _ in range(g * stagger):
                if self.envs[g].done.all():
                    break
                self.group_obs[g] = self.envs[g].step(FIFO().act(self.group_obs[g]))[0]

    def tokens(self, scale: float = 350.0, feature_set: str = "v1", **options) -> tuple[torch.Tensor, torch.Tensor]:
        """Task tokens of every episode, groups stacked -> (tokens [E, K, F], present [E, K]); ``options``:
        ``obs_to_tokens``'s ``q`` / ``band`` (``token_options(policy)``)."""
        toks = [obs_to_tokens(o, scale, feature_set, **options) for o in self.group_obs]
        return torch.cat([t for t, _ in toks]), torch.cat([p for _, p in toks])

    def place(self, picks: np.ndarray, placement: str = "greedy") -> np.ndarray:
        """A policy's ordered picks [E, M] (env actions, IDLE = -1) placed on each group's nodes
        (``place_policy`` with the policy's ``placement``; the identity on identical nodes with free preemption)."""
        n = self.episode_stream.E // self.n_groups
        return np.concatenate(
            [place_policy(o, picks[g * n : (g + 1) * n], placement) for g, o in enumerate(self.group_obs)]
        )

    def pairs(self, scale: float = 350.0) -> torch.Tensor:
        """(node, task) pair features of every episode, groups stacked -> [E, M, K, P] (mara/mat/node_choice.py)."""
        return torch.as_tensor(np.concatenate([node_choice.pair_features(o, scale) for o in self.group_obs]))

    def new_batch(self, g: int) -> None:
        episodes = self.episode_stream.next(self.episode_stream.E // self.n_groups)
        self.envs[g] = BatchedEnv(
            episodes,
            self.bank,
            predictor=self.predictor,
            beta=self.beta,
            compute_reward=self.reward == "dense",
            fm_cache=self.fm_cache,
            **self.env_kwargs,
        )
        self.group_obs[g] = self.envs[g].reset()
        self.ep_return[g] = np.zeros(episodes.E)

    def step(self, env_actions: np.ndarray):
        """Step every episode (actions [E, M]) -> (reward [E], done [E], live [E]); live = running before the step."""
        out = []
        n = self.episode_stream.E // self.n_groups
        lives = [~o.done for o in self.group_obs]
        results = step_envs(self.envs, [env_actions[g * n : (g + 1) * n] for g in range(self.n_groups)])
        for g, env in enumerate(self.envs):
            live = lives[g]
            self.group_obs[g], reward, done, successes = results[g]
            reward = np.where(live, reward if self.reward == "dense" else successes.astype(np.float64), 0.0)
            self.ep_return[g] += reward
            self.env_steps += int(live.sum())
            ended = done & live
            if ended.any():
                self.finished_success += list(env.succeeded[ended] / np.maximum(env.ep.n_tasks[ended], 1))
                self.finished_return += list(self.ep_return[g][ended])
            if done.all():
                self.new_batch(g)
            out.append((reward, done, live))
        return tuple(np.concatenate(x) for x in zip(*out))

    def pop_finished(self) -> tuple[list[float], list[float]]:
        out = self.finished_success, self.finished_return
        self.finished_success, self.finished_return = [], []
        return out

    def state_dict(self) -> dict:
        """Everything needed to continue the stream exactly (env arrays, observations, counters), as tensors and
        plain values (``safe_load.to_plain``), so a checkpoint holding it loads with ``weights_only=True``."""
        envs = [{k: v for k, v in e.__dict__.items() if k not in _NOT_STATE} for e in self.envs]
        return to_plain(
            {
                "envs": envs,
                "obs": self.group_obs,
                "ep_return": self.ep_return,
                "env_steps": self.env_steps,
                "counter": self.episode_stream.counter,
                "finished": (self.finished_success, self.finished_return),
            },
            _STATE_CLASSES,
        )

    def load_state_dict(self, state: dict) -> None:
        if "blob" in state:  # a state pickled inside a tensor: never unpickled here (ckpt_convert rewrites such files)
            raise CheckpointError(
                "the checkpoint's MAT training state is pickled bytes, refused unread: "
                "convert the file with python -m mara.ckpt_convert"
            )
        try:
            s = from_plain(state, _STATE_CLASSES)
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(
                f"the checkpoint's MAT training state is not one this version wrote ({exc})"
            ) from None
        for env, env_state in zip(self.envs, s["envs"]):
            env.__dict__.update(env_state)
        self.group_obs, self.ep_return, self.env_steps = s["obs"], s["ep_return"], s["env_steps"]
        self.episode_stream.counter = s["counter"]
        self.finished_success, self.finished_return = (list(x) for x in s["finished"])

    def restart(self) -> None:
        """Fresh batches for every group (a rank whose env state was not checkpointed)."""
        for g in range(self.n_groups):
            self.new_batch(g)


@dataclass
class RolloutBuffer:
    """One rollout: per-step tensors [T, E, ...] plus the bootstrap value of the state after the last step."""

    tokens: torch.Tensor
    present: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    rewards: torch.Tensor
    dones: torch.Tensor
    live: torch.Tensor
    last_value: torch.Tensor
    pairs: torch.Tensor | None = None  # a policy with a node head on unequal nodes: pair features [T, E, M, K, P],
    nodes: torch.Tensor | None = None  # its placement [T, E, M] (0..K by node index)
    order: torch.Tensor | None = None  # and the nodes' choosing order [M] (mara/mat/node_choice.py)


def collect_rollout(
    policy: MATPolicy, env: TrainingEnv, n_steps: int, generator: torch.Generator, scale: float = 350.0
) -> RolloutBuffer:
    """Sample ``n_steps`` joint actions per episode from ``policy`` in ``env`` (the policy runs under
    ``torch.inference_mode``; the buffer is stacked outside it, so the update can use it with autograd)."""
    tokens, present, actions, logprobs, values, rewards, dones, live, pairs, nodes = ([] for _ in range(10))
    dev = next(policy.parameters()).device  # the buffer lives with the policy (CPU or GPU); the simulator on the CPU
    node_head = getattr(policy, "node_head", False) and bool(env.group_obs[0].hetero)  # the policy places its picks
    order = torch.as_tensor(node_choice.node_order(env.group_obs[0].node_speed)) if node_head else None
    for _ in range(n_steps):
        tok, pres = env.tokens(scale, policy.features, **token_options(policy))
        tok, pres = tok.to(dev), pres.to(dev)
        if node_head:
            pr = env.pairs(scale).to(dev)
            with torch.inference_mode():
                a, n, logp, v = policy.act_nodes(tok, pres, pr, order, generator=generator)
            r, d, lv = env.step(to_env_actions(n, tok.shape[1]))
            pairs.append(pr), nodes.append(n)
        else:
            with torch.inference_mode():
                a, logp, v = policy.act(tok, pres, generator=generator, n_nodes=env.n_nodes)
            r, d, lv = env.step(env.place(to_env_actions(a, tok.shape[1]), policy.placement))  # picks -> nodes
        tokens.append(tok), present.append(pres), actions.append(a), logprobs.append(logp), values.append(v)
        rewards.append(torch.as_tensor(r, dtype=torch.float32, device=dev))
        dones.append(torch.as_tensor(d, device=dev))
        live.append(torch.as_tensor(lv, device=dev))
    tok, pres = env.tokens(scale, policy.features, **token_options(policy))
    with torch.inference_mode():
        _, _, last_value = policy.encode(tok.to(dev), pres.to(dev))
    st = torch.stack
    return RolloutBuffer(
        st(tokens),
        st(present),
        st(actions),
        st(logprobs),
        st(values),
        st(rewards),
        st(dones),
        st(live),
        last_value.clone(),
        st(pairs) if node_head else None,
        st(nodes) if node_head else None,
        order,
    )
