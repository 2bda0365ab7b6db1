"""YESNO data (OpenSLR 1): 8 kHz recordings of eight yes/no words -> log-mel frames [N, 257, 40], labels [N, 8]."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from tasks_zoo.errors import ZooError
from tasks_zoo.melspec import log_mel

SAMPLE_RATE = 8000
CLIP = 51_200  # 6.4 s, every recording cropped / zero-padded to this length
WORDS = 8


def labels_from_name(name: str) -> list[int]:
    """``0_1_0_0_1_0_1_1.wav`` -> [0, 1, 0, 0, 1, 0, 1, 1] (1 = yes)."""
    parts = Path(name).stem.split("_")
    if len(parts) != WORDS or any(p not in ("0", "1") for p in parts):
        raise ZooError(f"YESNO file {name}: name must be eight 0/1 labels joined by '_' (e.g. 0_1_0_0_1_0_1_1.wav)")
    return [int(p) for p in parts]


def features(waves: list[torch.Tensor]) -> torch.Tensor:
    """Waveforms [T_i] -> standardised log-mel frames [N, 257, 40] (fixed 6.4 s clip)."""
    feats = []
    for w in waves:
        w = w[:CLIP]
        w = torch.nn.functional.pad(w, (0, CLIP - len(w)))
        feats.append(log_mel(w, SAMPLE_RATE))
    x = torch.stack(feats)
    return (x - x.mean()) / (x.std() + 1e-6)


def load_yesno(folder: str | Path) -> tuple[torch.Tensor, torch.Tensor]:
    """Real YESNO from ``folder/*.wav`` (``folder`` = ``waves_yesno``) -> x float32 [N, 257, 40], y float32 [N, 8]."""
    import soundfile as sf

    folder = Path(folder)
    files = sorted(folder.glob("*.wav"))
    if not files:
        raise ZooError(
            f"YESNO not found: put the *.wav files of waves_yesno (OpenSLR SLR1) in {folder}, or use source=synthetic"
        )
    waves, labels = [], []
    for f in files:
        try:
            data, rate = sf.read(str(f), dtype="float32", always_2d=True)
        except Exception as exc:
            raise ZooError(f"YESNO file {f}: unreadable ({exc.__class__.__name__}: {exc})") from None
        if rate != SAMPLE_RATE:
            raise ZooError(f"YESNO file {f}: sample rate {rate}, expected {SAMPLE_RATE}")
        waves.append(torch.from_numpy(data.mean(axis=1)))
        labels.append(labels_from_name(f.name))
    return features(waves), torch.tensor(labels, dtype=torch.float32)


def synthetic_waves(n: int = 60, seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Eight tone-pair 'words' per clip (yes: high pair, no: low pair), speaker pitch jitter + noise -> waves, y
    [n, 8]."""
    rng = np.random.default_rng(20_000 + seed)
    y = rng.integers(0, 2, size=(n, WORDS))
    t = np.arange(int(0.35 * SAMPLE_RATE)) / SAMPLE_RATE
    waves = []
    for i in range(n):
        w = 0.12 * rng.standard_normal(CLIP)
        pitch = rng.uniform(0.85, 1.15)
        for k in range(WORDS):
            f1, f2 = (560.0, 1500.0) if y[i, k] else (470.0, 1200.0)
            env = np.sin(math.pi * t / t[-1]) ** 2
            word = env * (np.sin(2 * math.pi * f1 * pitch * t) + 0.6 * np.sin(2 * math.pi * f2 * pitch * t))
            start = int((0.3 + 0.75 * k + rng.uniform(-0.1, 0.1)) * SAMPLE_RATE)
            w[start : start + len(t)] += rng.uniform(0.08, 0.4) * word
        waves.append(torch.from_numpy(w.astype(np.float32)))
    return waves, torch.tensor(y, dtype=torch.float32)


def synthetic_yesno(n: int = 60, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic stand-in with the real shapes -> x float32 [n, 257, 40], y float32 [n, 8]."""
    waves, y = synthetic_waves(n, seed)
    return features(waves), y
