"""Log-mel spectrogram features written from scratch (torch STFT + triangular mel filterbank)."""

from __future__ import annotations

import math

import torch


def hz_to_mel(f):
    """HTK mel scale."""
    return 2595.0 * math.log10(1.0 + f / 700.0) if not torch.is_tensor(f) else 2595.0 * torch.log10(1.0 + f / 700.0)


def mel_to_hz(m: torch.Tensor) -> torch.Tensor:
    """Inverse HTK mel scale."""
    return 700.0 * (10.0 ** (m / 2595.0) - 1.0)


def mel_filterbank(
    n_fft: int, n_mels: int, sample_rate: int, f_min: float = 0.0, f_max: float | None = None
) -> torch.Tensor:
    """Triangular filters -> [n_mels, n_fft // 2 + 1]."""
    f_max = f_max or sample_rate / 2
    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1)  # [F]
    mels = torch.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    edges = mel_to_hz(mels)  # [n_mels + 2]
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    up = (freqs[None] - lo) / (mid - lo)
    down = (hi - freqs[None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


def log_mel(
    wave: torch.Tensor, sample_rate: int = 8000, n_fft: int = 256, hop: int = 200, n_mels: int = 40
) -> torch.Tensor:
    """Waveform [T] -> log-mel frames [T // hop + 1, n_mels]."""
    spec = torch.stft(wave.float(), n_fft=n_fft, hop_length=hop, window=torch.hann_window(n_fft), return_complex=True)
    power = spec.abs() ** 2  # [F, frames]
    mel = mel_filterbank(n_fft, n_mels, sample_rate) @ power  # [n_mels, frames]
    return torch.log(mel + 1e-6).T.contiguous()
