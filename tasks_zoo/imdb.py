"""IMDB sentiment data: ``aclImdb/{train,test}/{pos,neg}/*.txt`` -> token ids [N, L] + labels [N] (or a synthetic
stand-in)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import torch

from tasks_zoo.errors import ZooError

PAD, UNK = 0, 1
_TOKEN = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    """Lower-case word tokens; HTML line breaks removed."""
    return _TOKEN.findall(text.lower().replace("<br />", " "))


def build_vocab(docs: list[list[str]], max_size: int) -> dict[str, int]:
    """Most frequent tokens (ties broken alphabetically) -> ids from 2 (0 = pad, 1 = unknown)."""
    counts = Counter(tok for doc in docs for tok in doc)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: max_size - 2]
    return {tok: i + 2 for i, (tok, _) in enumerate(ranked)}


def encode(docs: list[list[str]], vocab: dict[str, int], max_len: int) -> torch.Tensor:
    """Token lists -> ids int64 [N, max_len] (truncated, right-padded with 0)."""
    out = torch.full((len(docs), max_len), PAD, dtype=torch.int64)
    for i, doc in enumerate(docs):
        ids = [vocab.get(t, UNK) for t in doc[:max_len]]
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.int64)
    return out


def load_imdb(
    folder: str | Path, max_len: int = 200, vocab_size: int = 20_000, split: str = "train"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Real IMDB split from ``folder/<split>/{pos,neg}/*.txt`` (``folder`` = ``aclImdb``) -> ids int64 [N, max_len],
    y int64 [N] (1 = pos), rows in file order (pos, then neg; the training loader shuffles)."""
    folder = Path(folder) / split
    files = [(f, lab) for lab, sub in ((1, "pos"), (0, "neg")) for f in sorted((folder / sub).glob("*.txt"))]
    if not files:
        raise ZooError(
            f"IMDB not found: no {split}/pos or {split}/neg *.txt in {folder.parent}, or use source=synthetic"
        )
    docs = [tokenize(f.read_text(encoding="utf-8", errors="replace")) for f, _ in files]
    vocab = build_vocab(docs, vocab_size)
    return encode(docs, vocab, max_len), torch.tensor([lab for _, lab in files], dtype=torch.int64)


def synthetic_imdb(
    n: int = 2048, max_len: int = 200, vocab_size: int = 5000, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zipf-like neutral text with a few class-marker tokens per review, variable length -> ids [n, max_len], y [n]."""
    g = torch.Generator().manual_seed(30_000 + seed)
    y = torch.randint(0, 2, (n,), generator=g)
    ranks = torch.arange(1, vocab_size - 101, dtype=torch.float64)
    zipf = (1.0 / ranks) / (1.0 / ranks).sum()
    ids = torch.multinomial(zipf, n * max_len, replacement=True, generator=g).view(n, max_len) + 102
    markers = torch.randint(0, 50, (n, max_len), generator=g) + 2 + 50 * y[:, None]  # pos 52..101, neg 2..51
    use = torch.rand(n, max_len, generator=g) < 0.04
    ids = torch.where(use, markers, ids)
    lengths = torch.randint(max_len // 4, max_len + 1, (n,), generator=g)
    ids[torch.arange(max_len)[None, :] >= lengths[:, None]] = PAD
    return ids, y.to(torch.int64)
