"""Montezuma's Revenge imitation data: emulator frame stacks uint8 [N, 4, 84, 84] labelled by a scripted RAM expert.

The expert (deterministic, documented): it reads the player's x position (RAM byte 42) and walks
towards a waypoint cycling through x = 77, 21, 133, 77 of the current room; when the player is
within 3 pixels of the waypoint it climbs (DOWN for 24 steps, then UP for 24 steps) and moves on to
the next waypoint; every 20th walking step is a jump in the walking direction (RIGHTFIRE/LEFTFIRE);
after 12 walking steps without a change of x it gives up on the waypoint and takes the next one.
Data are collected DAgger-style: the behaviour policy follows the expert with probability 0.7 and
otherwise takes a uniformly random action (seeded), and every visited state is labelled with the
expert's action. Frames: grayscale 210x160 resized (area) to 84x84, stacks of the last 4 frames
(repeated first frame at episode start). Generated once per data seed and cached as a .pt file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from tasks_zoo.errors import ZooError

N_ACTIONS = 18
NOOP, UP, RIGHT, LEFT, DOWN, RIGHTFIRE, LEFTFIRE = 0, 2, 3, 4, 5, 11, 12
WAYPOINTS = (77, 21, 133, 77)
STACK = 4


class ScriptedExpert:
    """The RAM-rule expert above; ``act(ram)`` -> action id in [0, 18)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.waypoint, self.climb, self.walk, self.last_x, self.stuck = 0, 0, 0, -1, 0

    def act(self, ram: np.ndarray) -> int:
        x = int(ram[42])
        if self.climb > 0:
            self.climb -= 1
            if self.climb == 0:
                self.waypoint = (self.waypoint + 1) % len(WAYPOINTS)
            return DOWN if self.climb >= 24 else UP
        target = WAYPOINTS[self.waypoint]
        if abs(x - target) <= 3:
            self.climb = 48
            return DOWN
        self.walk += 1
        self.stuck = self.stuck + 1 if x == self.last_x else 0
        self.last_x = x
        if self.stuck >= 12:
            self.stuck, self.waypoint = 0, (self.waypoint + 1) % len(WAYPOINTS)
            target = WAYPOINTS[self.waypoint]
        right = x < target
        if self.walk % 20 == 0:
            return RIGHTFIRE if right else LEFTFIRE
        return RIGHT if right else LEFT


def _frame(obs: np.ndarray) -> torch.Tensor:
    """Grayscale [210, 160] uint8 -> [84, 84] uint8."""
    t = torch.from_numpy(np.asarray(obs, dtype=np.float32))[None, None]
    return F.interpolate(t, size=(84, 84), mode="area")[0, 0].round().clamp(0, 255).to(torch.uint8)


def collect(n: int, seed: int, p_expert: float = 0.7) -> dict[str, torch.Tensor]:
    """Run the emulator -> frames uint8 [n, 84, 84], starts bool [n] (episode start), actions int64 [n]."""
    try:
        import ale_py
        import gymnasium as gym

        gym.register_envs(ale_py)
        env = gym.make("ALE/MontezumaRevenge-v5", obs_type="grayscale", repeat_action_probability=0.0)
    except Exception as exc:
        raise ZooError(
            f"Montezuma's Revenge unavailable ({exc.__class__.__name__}: {exc}); install ale-py>=0.9, or "
            "use source=synthetic"
        ) from None
    rng = np.random.default_rng(seed)
    expert = ScriptedExpert()
    obs, _ = env.reset(seed=seed)
    frames, starts, actions = [], [], []
    start = True
    for _ in range(n):
        frames.append(_frame(obs))
        starts.append(start)
        a_star = expert.act(env.unwrapped.ale.getRAM())
        actions.append(a_star)
        a = a_star if rng.random() < p_expert else int(rng.integers(N_ACTIONS))
        obs, _, term, trunc, _ = env.step(a)
        start = term or trunc
        if start:
            obs, _ = env.reset(seed=int(rng.integers(2**31)))
            expert.reset()
    env.close()
    return {
        "frames": torch.stack(frames),
        "starts": torch.tensor(starts),
        "actions": torch.tensor(actions, dtype=torch.int64),
    }


def stack_index(starts: torch.Tensor) -> torch.Tensor:
    """Episode starts bool [n] -> frame indices int64 [n, 4] of each stack (oldest first, clamped at episode start)."""
    n = len(starts)
    ep_start = torch.zeros(n, dtype=torch.int64)
    cur = 0
    for i in range(n):
        if starts[i]:
            cur = i
        ep_start[i] = cur
    offs = torch.arange(-(STACK - 1), 1)[None, :]
    return torch.maximum(torch.arange(n)[:, None] + offs, ep_start[:, None])


class FrameStacks(Dataset):
    """(frame stack uint8 [4, 84, 84], action) pairs built lazily from frames [n, 84, 84]."""

    def __init__(self, frames: torch.Tensor, starts: torch.Tensor, actions: torch.Tensor):
        self.frames, self.index, self.y = frames, stack_index(starts), actions

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return self.frames[self.index[i]], self.y[i]


def load_montezuma(cache_dir: str | Path, n: int = 4096, seed: int = 0) -> FrameStacks:
    """Real emulator dataset, generated once per (n, seed) and cached under ``cache_dir/montezuma``."""
    path = Path(cache_dir) / "montezuma" / f"dagger_n{n}_seed{seed}.pt"
    if path.exists():
        data = torch.load(path, weights_only=True)  # a cache file: tensors only, read as data
    else:
        data = collect(n, seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: workers may build it at once
        torch.save(data, tmp)
        tmp.replace(path)
    return FrameStacks(data["frames"], data["starts"], data["actions"])


def synthetic_montezuma(n: int = 2048, seed: int = 0) -> FrameStacks:
    """Stand-in: a bright 'player' block walking over a fixed room background; labels from the same rule on its x."""
    g = torch.Generator().manual_seed(40_000 + seed)
    rng = np.random.default_rng(40_000 + seed)
    room = (torch.rand(84, 84, generator=g) * 60).to(torch.uint8)
    room[60:64, :] = 120  # floor
    expert = ScriptedExpert()
    x, frames, actions, starts = 77, [], [], []
    for i in range(n):
        f = room.clone()
        px = int(x * 84 / 160)
        f[50:60, max(px - 2, 0) : px + 2] = 230
        frames.append(f)
        starts.append(i % 256 == 0)
        a = expert.act(np.array([0] * 42 + [x]))
        actions.append(a)
        step = a if rng.random() < 0.7 else int(rng.integers(N_ACTIONS))
        x = int(np.clip(x + {RIGHT: 3, RIGHTFIRE: 5, LEFT: -3, LEFTFIRE: -5}.get(step, 0), 0, 159))
    return FrameStacks(torch.stack(frames), torch.tensor(starts), torch.tensor(actions, dtype=torch.int64))
