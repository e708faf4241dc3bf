"""An independent float32 numpy forward of a llama-architecture GGUF model: the oracle of
lamina.model's native forward.

Independent of lamina: it reads the file with ``gguf`` alone, dequantises every tensor with
gguf's own ``dequantize`` and computes in float32 with numpy, the textbook way (no cache, one
full causal forward). RoPE is llama.cpp's "normal" layout: adjacent pairs (x[2i], x[2i+1])
rotate by pos·θ^(-2i/d), which is what the HF→GGUF converter's permutation of the Q/K weights
expects (the NeoX half-split layout gives top-1 agreement of 14–49 % with llama.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


def _dequant(t: object) -> F32:
    from gguf import dequantize

    shape = tuple(int(s) for s in reversed(t.shape.tolist()))  # type: ignore[attr-defined]
    a = dequantize(np.asarray(t.data), t.tensor_type)  # type: ignore[attr-defined]
    return np.ascontiguousarray(a, dtype=np.float32).reshape(shape)


@dataclass
class MsPoERule:
    """Ms-PoE as the reference computes it (the rule of cpp/lamina/model.hpp, written out).

    Layers first_layer … L−1: each query head's outlier share is the fraction of its last
    query's softmax row (un-rotated q · k / √D) above 3 / T; KV groups are sorted by their
    heads' mean share (descending, stable); "rank" gives the group of rank k the ratio index k,
    "gather" gives group g the index order[g], "normal" gives group g the index Hk − 1 − g;
    r_i = ratio_min + (ratio_max − ratio_min) · i / Hk (float32). A rescaled head rotates its
    queries and keys at p / r; with ``window`` > 0 a distance δ < window keeps the plain
    rotations and δ >= window uses the query at p / r + window · (1 − 1/r) against the key at
    p / r. ``plain_heads`` (layer, query head) stay at plain RoPE."""

    ratio_min: float = 1.2
    ratio_max: float = 1.8
    first_layer: int = 2
    order: str = "rank"
    window: int = 0
    plain_heads: frozenset[tuple[int, int]] = field(default_factory=frozenset)
    #: filled by ReferenceLlama.logits: the ratio index per (layer, KV head), -1 if plain
    assigned: dict[int, list[int]] = field(default_factory=dict)

    def ratio(self, i: int, n_kv: int) -> float:
        lo, hi = np.float32(self.ratio_min), np.float32(self.ratio_max)
        return float(lo + (hi - lo) * np.float32(i) / np.float32(n_kv))

    def assign(self, q: F32, k: F32, n_heads: int, n_kv: int) -> list[int]:
        """Ratio index per KV group from the un-rotated q (T, H, D) and k (T, Hk, D)."""
        T, D = q.shape[0], q.shape[-1]
        g = n_heads // n_kv
        share = np.empty(n_heads, dtype=np.float32)
        for hh in range(n_heads):
            s = (k[:, hh // g, :] @ q[-1, hh, :]) * np.float32(1.0 / np.sqrt(D))
            p = np.exp(s - s.max())
            p = p / p.sum()
            share[hh] = np.float32((p > np.float32(3.0) / np.float32(T)).sum()) / np.float32(T)
        score = share.reshape(n_kv, g).sum(axis=1) / np.float32(g)
        order = np.argsort(-score, kind="stable")
        idx = [0] * n_kv
        for j in range(n_kv):
            if self.order == "rank":
                idx[int(order[j])] = j
            elif self.order == "gather":
                idx[j] = int(order[j])
            else:
                idx[j] = n_kv - 1 - j
        return idx


@dataclass(frozen=True)
class ChannelRule:
    """Single-channel scaling: in layers [first, last) channel ``channel`` of the attention
    input (after RMSNorm) times ``factor`` for the query and key projections (values plain);
    ``last_tokens`` 0: every query, n >= 1: the last n queries read the scaled queries and
    keys, the others the plain ones."""

    first: int
    last: int
    channel: int
    factor: float
    last_tokens: int
    rows: tuple[int, ...] | None = None  # the scaled queries instead (one per forward call's end)


@dataclass
class ReferenceLlama:
    """Float32 weights of the whole model (about 4 bytes per parameter)."""

    n_layers: int
    n_heads: int
    n_kv: int
    head_dim: int
    rope_base: float
    eps: float
    emb: F32
    out: F32
    out_norm: F32
    layers: list[dict[str, F32]]

    @classmethod
    def open(cls, path: str | Path) -> ReferenceLlama:
        import gguf

        r = gguf.GGUFReader(str(path))

        def f(key: str) -> object:
            return r.fields[key].contents()

        t = {x.name: x for x in r.tensors}
        n_layers = int(f("llama.block_count"))  # type: ignore[call-overload]
        n_heads = int(f("llama.attention.head_count"))  # type: ignore[call-overload]
        d = int(f("llama.embedding_length"))  # type: ignore[call-overload]
        names = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up", "ffn_down"]
        layers = [{n: _dequant(t[f"blk.{i}.{n}.weight"]) for n in names} for i in range(n_layers)]
        emb = _dequant(t["token_embd.weight"])
        out = _dequant(t["output.weight"]) if "output.weight" in t else emb
        return cls(
            n_layers=n_layers,
            n_heads=n_heads,
            n_kv=int(f("llama.attention.head_count_kv")),  # type: ignore[call-overload]
            head_dim=d // n_heads,
            rope_base=float(f("llama.rope.freq_base")),  # type: ignore[arg-type]
            eps=float(f("llama.attention.layer_norm_rms_epsilon")),  # type: ignore[arg-type]
            emb=emb,
            out=out,
            out_norm=_dequant(t["output_norm.weight"]),
            layers=layers,
        )

    def _rms(self, x: F32, w: F32) -> F32:
        ms = np.mean(x.astype(np.float64) ** 2, axis=-1, keepdims=True)
        out: F32 = (x / np.sqrt(ms + self.eps)).astype(np.float32) * w
        return out

    def _rope(self, x: F32, pos: npt.NDArray[np.int64] | npt.NDArray[np.float64]) -> F32:
        # x: (T, H, D); adjacent pairs (2i, 2i+1) rotate by pos * base^(-2i/D)
        D = x.shape[-1]
        inv = self.rope_base ** (-np.arange(0, D, 2, dtype=np.float64) / D)
        ang = pos[:, None].astype(np.float64) * inv[None, :]
        cos = np.cos(ang)[:, None, :].astype(np.float32)
        sin = np.sin(ang)[:, None, :].astype(np.float32)
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * cos - x1 * sin
        y[..., 1::2] = x0 * sin + x1 * cos
        return y

    def logits(
        self,
        ids: list[int],
        last_keeps: dict[tuple[int, int], npt.NDArray[np.int64]] | None = None,
        record: list[F32] | None = None,
        ms_poe: MsPoERule | None = None,
        channel: ChannelRule | None = None,
        hidden: list[F32] | None = None,
    ) -> F32:
        """float32 (len(ids), vocab): one causal forward of ``ids`` from position 0.

        ``last_keeps[(layer, kv_head)]``: positions (< T - 1) the *last* query may attend to in
        that layer and KV head besides itself — a cache compacted after the first T - 1 tokens.
        ``record``: when given, each layer's softmax rows (H, T, T) are appended to it.
        ``ms_poe``: rescale positions by that rule (its ``assigned`` is filled in).
        ``channel``: scale one channel of the attention input by that rule.
        ``hidden``: when given, each layer's output residual stream (T, d) is appended."""
        T, H, Hk, D = len(ids), self.n_heads, self.n_kv, self.head_dim
        pos = np.arange(T, dtype=np.int64)
        x = self.emb[np.asarray(ids)]
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            q_raw = (h @ L["attn_q"].T).reshape(T, H, D)
            k_raw = (h @ L["attn_k"].T).reshape(T, Hk, D)
            q = self._rope(q_raw, pos)
            k = self._rope(k_raw, pos)
            v = (h @ L["attn_v"].T).reshape(T, Hk, D)
            g = H // Hk
            chan_rows = 0
            if channel is not None and channel.first <= li < channel.last:
                hs = h.copy()
                hs[:, channel.channel] *= np.float32(channel.factor)
                qs_all = self._rope((hs @ L["attn_q"].T).reshape(T, H, D), pos)
                ks_all = self._rope((hs @ L["attn_k"].T).reshape(T, Hk, D), pos)
                chan_rows = T if channel.last_tokens == 0 else min(T, channel.last_tokens)
            scaled: dict[int, F32] | None = None
            if ms_poe is not None and li >= ms_poe.first_layer:
                idx = ms_poe.assign(q_raw, k_raw, H, Hk)
                ms_poe.assigned[li] = idx
                scaled = {}
                delta = pos[:, None] - pos[None, :]
                for hh in range(H):
                    if (li, hh) in ms_poe.plain_heads:
                        continue
                    r = np.float64(ms_poe.ratio(idx[hh // g], Hk))
                    ks = self._rope(k_raw[:, hh // g : hh // g + 1, :], pos / r)[:, 0, :]
                    if ms_poe.window == 0:
                        qs = self._rope(q_raw[:, hh : hh + 1, :], pos / r)[:, 0, :]
                        scaled[hh] = (qs @ ks.T) / np.float32(np.sqrt(D))
                    else:
                        w = ms_poe.window
                        qf = self._rope(q_raw[:, hh : hh + 1, :], pos / r + w * (1.0 - 1.0 / r))[:, 0, :]
                        near = (q[:, hh, :] @ k[:, hh // g, :].T) / np.float32(np.sqrt(D))
                        far = (qf @ ks.T) / np.float32(np.sqrt(D))
                        scaled[hh] = np.where(delta >= w, far, near).astype(np.float32)
            att = np.empty((T, H, D), dtype=np.float32)
            probs = np.empty((H, T, T), dtype=np.float32) if record is not None else None
            for hh in range(H):
                kv = hh // g
                m = mask
                if last_keeps is not None and (li, kv) in last_keeps:
                    m = mask.copy()
                    m[-1, :-1] = -np.inf
                    m[-1, last_keeps[li, kv]] = 0.0
                if scaled is not None and hh in scaled:
                    s = scaled[hh] + m
                else:
                    s = (q[:, hh, :] @ k[:, kv, :].T) / np.float32(np.sqrt(D)) + m
                if chan_rows:
                    assert channel is not None
                    rows = list(range(T - chan_rows, T)) if channel.rows is None else list(channel.rows)
                    s[rows] = (qs_all[rows, hh, :] @ ks_all[:, kv, :].T) / np.float32(np.sqrt(D)) + m[rows]
                s = np.exp(s - s.max(axis=1, keepdims=True))
                s /= s.sum(axis=1, keepdims=True)
                if probs is not None:
                    probs[hh] = s
                att[:, hh, :] = s @ v[:, kv, :]
            if record is not None and probs is not None:
                record.append(probs)
            x = x + att.reshape(T, H * D) @ L["attn_output"].T
            h = self._rms(x, L["ffn_norm"])
            a = h @ L["ffn_gate"].T
            u = h @ L["ffn_up"].T
            x = x + ((a / (1.0 + np.exp(-a))) * u) @ L["ffn_down"].T
            if hidden is not None:
                hidden.append(x.copy())
        return np.ascontiguousarray(self._rms(x, self.out_norm) @ self.out.T, dtype=np.float32)
