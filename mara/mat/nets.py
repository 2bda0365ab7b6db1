"""Multi-Agent Transformer (§4.2): task-slot encoder → centralised value; node decoder → masked matching.

Two decoders (``decoder``): ``autoregressive`` (the paper's, below; what shipped checkpoints use, and the default
for checkpoints that do not record one) and ``plackett_luce`` (faster PPO): the encoder output scores every slot and
idle once, and the M nodes' picks are drawn without replacement from those scores (mara/mat/plackett_luce.py), so
the network cost does not grow with M. Both give the same interface (``act``/``evaluate``) and masks (Eq. 2).

Shapes: ``E`` episodes (batch), ``K`` task slots, ``M`` nodes, ``F`` token features, ``d`` model width.
Choices per node are ``0..K-1`` (a slot) or ``K`` (idle). Node i's distribution is conditioned on the
encoded tasks and on nodes 0..i-1's choices (causal self-attention over node positions, each position
fed the previous node's choice); a mask removes absent slots and slots taken by earlier nodes, so
Eq. 2 holds by construction and idle is always allowed. Rollout decodes node by node through the same
``decode`` pass that training uses teacher-forced, so both give the same log-probabilities.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mara.mat import node_choice, plackett_luce
from mara.mat.features import BAND_LEVELS, BAND_Q, N_GLOBAL_FEATURES, n_features
from mara.mat.masks import choice_mask
from mara.mat.softmax import log_softmax_last, softmax_last


class Attention(nn.Module):
    """Multi-head attention with a boolean ``allow [E, Lq, Lk]`` mask (or ``[E, 1, Lk]``, the same for every query;
    every query must allow one key)."""

    def __init__(self, d: int, n_heads: int) -> None:
        super().__init__()
        if d % n_heads:
            raise ValueError(f"d_model {d} must be divisible by n_heads {n_heads}")
        self.h = n_heads
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def kv(self, mem: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values [E, h, Lk, d/h] of ``mem [E, Lk, d]`` (cached across decoding steps)."""
        E, Lk, d = mem.shape
        split = lambda t: t.view(E, Lk, self.h, d // self.h).transpose(1, 2)  # noqa: E731
        return split(self.k(mem)), split(self.v(mem))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allow: torch.Tensor | None) -> torch.Tensor:
        E, Lq, d = x.shape
        q = self.q(x).view(E, Lq, self.h, d // self.h).transpose(1, 2)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.h)
        if allow is not None:
            scores = scores.masked_fill(~allow[:, None], float("-inf"))
        out = softmax_last(scores) @ v
        return self.o(out.transpose(1, 2).reshape(E, Lq, d))

    def forward(self, x: torch.Tensor, mem: torch.Tensor, allow: torch.Tensor | None) -> torch.Tensor:
        return self.attend(x, *self.kv(mem), allow)


class Block(nn.Module):
    """Pre-norm Transformer block: self-attention, optional cross-attention to ``mem``, MLP.

    ``forward`` runs a whole (masked) sequence; ``step`` appends one position using cached self-attention
    keys/values of the earlier positions, which is the causal mask evaluated one position at a time.
    """

    def __init__(self, d: int, n_heads: int, d_ff: int, cross: bool) -> None:
        super().__init__()
        self.ln_self, self.self_attn = nn.LayerNorm(d), Attention(d, n_heads)
        self.ln_cross = nn.LayerNorm(d) if cross else None
        self.cross_attn = Attention(d, n_heads) if cross else None
        self.ln_mlp = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, d_ff), nn.GELU(), nn.Linear(d_ff, d))

    def forward(self, x, allow_self, mem_kv=None, allow_mem=None):
        h = self.ln_self(x)
        x = x + self.self_attn(h, h, allow_self)
        return self._rest(x, mem_kv, allow_mem)

    def step(self, x, cache: dict, mem_kv=None, allow_mem=None):
        """One new position ``x [E, 1, d]``; ``cache`` holds (and is extended with) earlier self-attention k/v."""
        h = self.ln_self(x)
        k, v = self.self_attn.kv(h)
        if "k" in cache:
            k, v = torch.cat([cache["k"], k], dim=2), torch.cat([cache["v"], v], dim=2)
        cache["k"], cache["v"] = k, v
        x = x + self.self_attn.attend(h, k, v, None)
        return self._rest(x, mem_kv, allow_mem)

    def _rest(self, x, mem_kv, allow_mem):
        if self.cross_attn is not None:
            x = x + self.cross_attn.attend(self.ln_cross(x), *mem_kv, allow_mem)
        return x + self.mlp(self.ln_mlp(x))


DECODERS = ("autoregressive", "plackett_luce")
PLACEMENTS = ("greedy", "displace")


class MATPolicy(nn.Module):
    """Encoder over [global token, K slot tokens] and a decoder over the M nodes; see the module docstring."""

    def __init__(
        self,
        n_slots: int = 10,
        n_nodes: int = 7,
        d_model: int = 64,
        n_heads: int = 1,
        n_blocks: int = 1,
        d_ff: int = 128,
        value_scale: float = 1.0,
        idle_bias: float = 0.0,
        decoder: str = "autoregressive",
        slot_buckets: list[int] | None = None,
        features: str = "v1",
        token_q: float = BAND_Q,
        token_band: tuple[float, float] | list[float] = BAND_LEVELS,
        placement: str = "greedy",
        node_head: bool = False,
    ) -> None:
        super().__init__()
        self._set_options(placement, node_head, features, token_q, token_band, decoder)
        # Plackett–Luce only (the autoregressive decoder always runs all K slots); sizes outside 1..K-1 mean nothing
        use = slot_buckets if decoder == "plackett_luce" else ()
        self.buckets = sorted({int(b) for b in use or () if 0 < int(b) < n_slots} | {n_slots})
        self.K, self.M, self.d, self.value_scale = n_slots, n_nodes, d_model, value_scale
        d = d_model
        self.slot_in = nn.Linear(n_features(features)[1], d)
        self.global_in = nn.Linear(N_GLOBAL_FEATURES, d)
        self.global_tok = nn.Parameter(torch.zeros(d))
        self.enc_blocks = nn.ModuleList(Block(d, n_heads, d_ff, cross=False) for _ in range(n_blocks))
        self.enc_ln = nn.LayerNorm(d)
        self.value_head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
        if decoder == "autoregressive":  # the Plackett–Luce decoder has no decoder blocks: slots are scored from `mem`
            self.start_tok = nn.Parameter(torch.zeros(d))
            self.idle_tok = nn.Parameter(torch.zeros(d))
            self.choice_in = nn.Linear(d, d)
            self.node_emb = nn.Parameter(torch.randn(n_nodes, d) * 0.02)
            self.dec_blocks = nn.ModuleList(Block(d, n_heads, d_ff, cross=True) for _ in range(n_blocks))
            self.dec_ln = nn.LayerNorm(d)
        self._init_heads(d, decoder, idle_bias)

    def _set_options(self, placement, node_head, features, token_q, token_band, decoder) -> None:
        """The options that shape the network, checked (one ValueError naming the ``mat.net`` setting)."""
        # how the policy's ordered picks go onto unequal nodes (mara/allocators/placement.py): the rules' greedy
        # placement, or with the displacement move; checkpoints without it: greedy. The identity on identical nodes.
        if placement not in PLACEMENTS:
            raise ValueError(f"mat.net.placement must be one of {', '.join(PLACEMENTS)}, got {placement!r}")
        self.placement = placement
        # the policy chooses the nodes itself on unequal nodes (mara/mat/node_choice.py; Plackett–Luce only); without
        # it (checkpoints without the key) its picks are placed by ``placement``
        if node_head and decoder != "plackett_luce":
            raise ValueError("mat.net.node_head needs mat.net.decoder=plackett_luce")
        self.node_head = bool(node_head)
        self.features = features  # token feature set (mara/mat/features.py); checkpoints without it: v1
        # v2/v3 tokens: the quantile the stage / third slack are judged at and the levels of the band's ends
        # (features.token_options); checkpoints without them: Slack-FM-q's 0.01 on the FM's (0.1, 0.9) band
        self.token_q, self.token_band = float(token_q), tuple(float(x) for x in token_band)
        if (
            not 0.0 < self.token_q < 1.0
            or len(self.token_band) != 2
            or not 0.0 < self.token_band[0] < 0.5 < self.token_band[1] < 1.0
        ):
            raise ValueError(
                f"mat.net.token_q must lie in (0, 1) and mat.net.token_band be (lo < 0.5 < hi), "
                f"got {token_q} and {list(token_band)}"
            )
        self.n_slot_features, n_feat = n_features(features)
        if decoder not in DECODERS:
            raise ValueError(f"mat.net.decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
        self.decoder = decoder

    def _init_heads(self, d: int, decoder: str, idle_bias: float) -> None:
        """The pointer, idle, slot and node heads, initialised to a near-uniform policy (created after the encoder
        and decoder, in this order: the parameters' random initialisation depends on it)."""
        self.ptr_q, self.ptr_k = nn.Linear(d, d), nn.Linear(d, d)
        self.idle_head = nn.Linear(d, 1)
        heads = [self.ptr_q, self.idle_head]
        if decoder == "plackett_luce":  # a per-slot score linear in the slot's encoding, learning as fast as idle's
            self.slot_head = nn.Linear(d, 1)
            heads.append(self.slot_head)
        if self.node_head:  # a node's score for a task: its pair features and the task's encoding; idle's from the node
            self.pair_in = nn.Linear(node_choice.N_PAIR + node_choice.N_DYNAMIC, d)
            self.pair_slot = nn.Linear(d, d)
            self.pair_out = nn.Sequential(nn.GELU(), nn.Linear(d, 1))
            self.node_idle = nn.Linear(2, 1)
            heads += [self.pair_out[-1], self.node_idle]
        for head in heads:  # near-uniform initial policy over the allowed slots
            nn.init.normal_(head.weight, std=0.01 / math.sqrt(d))
            nn.init.zeros_(head.bias)
        nn.init.constant_(self.idle_head.bias, idle_bias)  # < 0: start near a random work-conserving matching
        nn.init.normal_(self.value_head[-1].weight, std=0.01)
        nn.init.zeros_(self.value_head[-1].bias)

    # ---------------------------------------------------------------- pieces
    def encode(self, tokens: torch.Tensor, present: torch.Tensor):
        """tokens [E, K, F], present [E, K] -> (memory [E, 1+K, d], memory allow [E, 1+K], value [E])."""
        E = tokens.shape[0]
        g = self.global_tok + self.global_in(tokens[:, 0, self.n_slot_features :])
        x = torch.cat([g[:, None], self.slot_in(tokens)], dim=1)
        allow_k = torch.cat([present.new_ones(E, 1), present], dim=1)
        allow = allow_k[:, None, :]  # [E, 1, 1+K]: every query allows the same keys (broadcast, not materialised)
        for blk in self.enc_blocks:
            x = blk(x, allow)
        mem = self.enc_ln(x)
        value = self.value_head(mem[:, 0]).squeeze(-1) * self.value_scale
        return mem, allow_k, value

    def _decoder_context(self, mem):
        """Per-observation decoder inputs shared by every node: choice embeddings, cross-attention k/v, pointer keys."""
        E = mem.shape[0]
        slots = mem[:, 1:]  # [E, K, d]
        table = self.choice_in(torch.cat([slots, self.idle_tok.expand(E, 1, self.d)], dim=1))  # [E, K+1, d]
        mem_kv = [blk.cross_attn.kv(mem) for blk in self.dec_blocks]
        return table, mem_kv, self.ptr_k(slots)

    def scores(self, mem):
        """Plackett–Luce choice scores [E, K+1] (slots, then idle) from the encoder memory: per slot a linear score
        plus a pointer query from the global token against the slot; idle's score from the global token."""
        g, slots = mem[:, 0], mem[:, 1:]
        slot = (self.ptr_k(slots) @ self.ptr_q(g)[:, :, None]).squeeze(-1) / math.sqrt(self.d) + self.slot_head(
            slots
        ).squeeze(-1)
        return torch.cat([slot, self.idle_head(g)], dim=-1)

    def encode_scores(self, tokens, present, with_slots: bool = False):
        """Plackett–Luce path -> (scores [E, K+1], value [E]). With ``slot_buckets`` the present slots are moved to
        the front (the encoder has no slot positions, so this changes nothing but the order) and each row runs with
        only as many slot tokens as its bucket holds (absent slots are masked keys whose own outputs are unused, so
        dropping them is exact up to float summation order); scores go back to the original slot positions.
        ``with_slots``: also the slot encodings [E, K, d] (zero for dropped absent slots), which the node head reads."""
        K = present.shape[1]
        buckets = [b for b in self.buckets if b < K] + [
            K
        ]  # this call's K (a policy trained across sizes runs at any K)
        if len(buckets) == 1:
            mem, _, value = self.encode(tokens, present)
            return (self.scores(mem), value, mem[:, 1:]) if with_slots else (self.scores(mem), value)
        order = torch.argsort((~present).to(torch.int8), dim=1, stable=True)  # present slots first, in slot order
        tok = tokens.gather(1, order[..., None].expand(-1, -1, tokens.shape[2]))
        pres = present.gather(1, order)
        n = present.sum(dim=1)
        rows, slot_scores, idle, values, mems, lo = [], [], [], [], [], -1
        for hi in buckets:
            idx = torch.nonzero((n > lo) & (n <= hi)).squeeze(1)
            lo = hi
            if len(idx) == 0:
                continue
            mem, _, v = self.encode(tok[idx, :hi], pres[idx, :hi])
            sc = self.scores(mem)  # [e, hi + 1]
            slot_scores.append(torch.cat([sc[:, :hi], sc.new_zeros(len(idx), K - hi)], dim=1))
            idle.append(sc[:, hi:])
            values.append(v)
            if with_slots:
                mems.append(torch.cat([mem[:, 1:], mem.new_zeros(len(idx), K - hi, mem.shape[2])], dim=1))
            rows.append(idx)
        inv = torch.argsort(torch.cat(rows))
        sorted_slots = torch.cat(slot_scores)[inv]
        slots = torch.zeros_like(sorted_slots).scatter(1, order, sorted_slots)  # back to the original slot positions
        out = (torch.cat([slots, torch.cat(idle)[inv]], dim=1), torch.cat(values)[inv])
        if not with_slots:
            return out
        sorted_mem = torch.cat(mems)[inv]
        slot_mem = torch.zeros_like(sorted_mem).scatter(1, order[..., None].expand_as(sorted_mem), sorted_mem)
        return (*out, slot_mem)

    def _logits(self, h, ptr_keys):
        slot_logits = self.ptr_q(h) @ ptr_keys.transpose(1, 2) / math.sqrt(self.d)  # [E, L, K]
        return torch.cat([slot_logits, self.idle_head(h)], dim=-1)

    def decode(self, mem, allow_k, present, actions):
        """Masked logits for every node, teacher-forced on ``actions [E, M]`` (0..K) -> [E, M, K+1]."""
        E, M = actions.shape
        table, mem_kv, ptr_keys = self._decoder_context(mem)
        prev = torch.gather(table, 1, actions[:, :-1, None].expand(E, M - 1, self.d))
        x = torch.cat([self.start_tok.expand(E, 1, self.d), prev], dim=1) + self.node_emb[:M]
        causal = torch.ones(M, M, dtype=torch.bool, device=x.device).tril().expand(E, M, M)
        allow_mem = allow_k[:, None, :]
        for blk, kv in zip(self.dec_blocks, mem_kv):
            x = blk(x, causal, kv, allow_mem)
        logits = self._logits(self.dec_ln(x), ptr_keys)
        return logits.masked_fill(~choice_mask(present, actions), torch.finfo(logits.dtype).min)

    def node_logits(self, slot_mem, pairs, chosen, rank):
        """The node head's logits [E, M, K+1] by node index (tasks, then idle) from the slot encodings [E, K, d], the
        pair features [E, M, K, N_PAIR] and the chosen set (mara/mat/node_choice.py)."""
        x = node_choice.dynamic_channels(pairs, chosen, rank)
        task = self.pair_out(self.pair_in(x) + self.pair_slot(slot_mem)[:, None]).squeeze(-1)  # [E, M, K]
        speed = pairs[..., 0].amax(dim=2)  # the node's relative speed (pairs are zero for absent slots)
        held = (pairs[..., 1] * chosen[:, None, :]).sum(dim=2).clamp(max=1.0)  # a chosen task ran on this node at t-1
        idle_in = torch.stack([speed, held], dim=-1)
        return torch.cat([task, self.node_idle(idle_in)], dim=-1)

    def act_nodes(
        self, tokens, present, pairs, order, deterministic: bool = False, generator: torch.Generator | None = None
    ):
        """Picks and the node head's placement of them -> (picks [E, M] in priority order, node actions [E, M] by
        node index, both 0..K; logprob [E] of both; value [E]). ``order [M]``: the nodes' choosing order
        (``node_choice.node_order``); M = ``pairs.shape[1]``."""
        scores, value, slot_mem = self.encode_scores(tokens, present, with_slots=True)
        M = pairs.shape[1]
        picks = plackett_luce.sample(scores, present, M, deterministic, generator)
        chosen, rank = node_choice.chosen_ranks(picks, present.shape[1])
        logits = self.node_logits(slot_mem, pairs, chosen, rank)
        nodes = node_choice.decode(logits, chosen, order, deterministic, generator)
        logprob = plackett_luce.log_prob(scores, present, picks) + node_choice.log_prob(logits, chosen, nodes, order)
        return picks, nodes, logprob, value

    def evaluate_nodes(self, tokens, present, picks, pairs, nodes, order):
        """Teacher-forced pass over picks [E, M] (priority order) and their placement ``nodes [E, M]`` (by node
        index) -> (logprob [E] of both, entropy [E] of the picks per node as ``evaluate``'s, value [E]): what
        imitation of a rule's placed actions and PPO with the node head optimise."""
        scores, value, slot_mem = self.encode_scores(tokens, present, with_slots=True)
        chosen, rank = node_choice.chosen_ranks(picks, present.shape[1])
        logits = self.node_logits(slot_mem, pairs, chosen, rank)
        logp = log_softmax_last(plackett_luce.masked_logits(scores, present, picks))  # [E, M, K+1]
        logprob = logp.gather(2, picks[..., None]).squeeze(-1).sum(dim=1) + node_choice.log_prob(
            logits, chosen, nodes, order
        )
        return logprob, _entropy(logp), value

    # --------------------------------------------------------------- public
    def act(
        self,
        tokens,
        present,
        deterministic: bool = False,
        generator: torch.Generator | None = None,
        n_nodes: int | None = None,
    ):
        """Joint action -> (actions [E, M] in 0..K, logprob [E], value [E]): autoregressive (one decoder position per
        node, cached) or Plackett–Luce (one scoring pass, M picks without replacement). ``n_nodes``: M for this
        call (Plackett–Luce only, whose network has no node or slot positions; K is ``tokens.shape[1]``); default
        the M it was built for."""
        if self.decoder == "plackett_luce":
            scores, value = self.encode_scores(tokens, present)
            actions = plackett_luce.sample(scores, present, n_nodes or self.M, deterministic, generator)
            return actions, plackett_luce.log_prob(scores, present, actions), value
        if n_nodes not in (None, self.M) or tokens.shape[1] != self.K:
            raise ValueError(f"the autoregressive decoder acts for its own M={self.M}, K={self.K} only")
        mem, allow_k, value = self.encode(tokens, present)
        E = tokens.shape[0]
        table, mem_kv, ptr_keys = self._decoder_context(mem)
        allow_mem = allow_k[:, None, :]
        caches = [{} for _ in self.dec_blocks]
        allow = torch.cat([present, present.new_ones(E, 1)], dim=1)  # [E, K+1]
        actions = torch.empty((E, self.M), dtype=torch.long, device=tokens.device)
        logprob = torch.zeros(E, device=tokens.device)
        x = self.start_tok.expand(E, 1, self.d)
        rows = torch.arange(E, device=tokens.device)
        for i in range(self.M):
            x = x + self.node_emb[i]
            for blk, kv, cache in zip(self.dec_blocks, mem_kv, caches):
                x = blk.step(x, cache, kv, allow_mem)
            logits = self._logits(self.dec_ln(x), ptr_keys)[:, 0]
            logp = log_softmax_last(logits.masked_fill(~allow, torch.finfo(logits.dtype).min))
            if deterministic:
                a = logp.argmax(dim=-1)
            else:
                probs = logp.exp()
                if generator is not None and generator.device != probs.device:  # CPU generator, GPU policy
                    probs = probs.to(generator.device)
                a = torch.multinomial(probs, 1, generator=generator).squeeze(-1).to(logp.device)
            actions[:, i] = a
            logprob = logprob + logp[rows, a]
            allow = allow.clone()
            allow[rows, a] = a == self.K  # a taken slot is closed to later nodes; idle stays open
            x = table[rows, a][:, None]
        return actions, logprob, value

    def evaluate(self, tokens, present, actions):
        """Teacher-forced pass -> (logprob [E] of the joint action, entropy [E] (mean over nodes), value [E])."""
        if self.decoder == "plackett_luce":
            scores, value = self.encode_scores(tokens, present)
            logits = plackett_luce.masked_logits(scores, present, actions)
        else:
            mem, allow_k, value = self.encode(tokens, present)
            logits = self.decode(mem, allow_k, present, actions)
        logp = log_softmax_last(logits)  # [E, M, K+1]
        logprob = logp.gather(2, actions[..., None]).squeeze(-1).sum(dim=1)
        return logprob, _entropy(logp), value


def _entropy(logp: torch.Tensor) -> torch.Tensor:
    """Entropy [E] of per-node choice log-probabilities ``[E, M, K+1]``, averaged over the nodes (MAT: over agents)."""
    p = logp.exp()
    return -(torch.where(p > 0, p * logp, torch.zeros_like(p))).sum(dim=2).mean(dim=1)


def to_env_actions(actions: torch.Tensor, n_slots: int):
    """Choice indices (K = idle) -> env actions (IDLE = -1), numpy [E, M]."""
    a = actions.cpu().numpy().copy()
    a[a == n_slots] = -1
    return a
