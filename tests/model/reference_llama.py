"""An independent float32 numpy forward of a llama-architecture GGUF model: the oracle of
lamina.model's native forward.

Independent of lamina: it reads the file with ``gguf`` alone, dequantises every tensor with
gguf's own ``dequantize`` and computes in float32 with numpy, the textbook way (no cache, one
full causal forward). RoPE is llama.cpp's "normal" layout: adjacent pairs (x[2i], x[2i+1])
rotate by pos·θ^(-2i/d), which is what the HF→GGUF converter's permutation of the Q/K weights
expects (the NeoX half-split layout gives top-1 agreement of 14–49 % with llama.cpp).
"""

from __future__ import annotations

from dataclasses import dataclass
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
        return (x / np.sqrt(ms + self.eps)).astype(np.float32) * w

    def _rope(self, x: F32, pos: npt.NDArray[np.int64]) -> F32:
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
    ) -> F32:
        """float32 (len(ids), vocab): one causal forward of ``ids`` from position 0.

        ``last_keeps[(layer, kv_head)]``: positions (< T - 1) the *last* query may attend to in
        that layer and KV head besides itself — a cache compacted after the first T - 1 tokens.
        ``record``: when given, each layer's softmax rows (H, T, T) are appended to it."""
        T, H, Hk, D = len(ids), self.n_heads, self.n_kv, self.head_dim
        pos = np.arange(T, dtype=np.int64)
        x = self.emb[np.asarray(ids)]
        mask = np.triu(np.full((T, T), -np.inf, dtype=np.float32), 1)
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            q = self._rope((h @ L["attn_q"].T).reshape(T, H, D), pos)
            k = self._rope((h @ L["attn_k"].T).reshape(T, Hk, D), pos)
            v = (h @ L["attn_v"].T).reshape(T, Hk, D)
            g = H // Hk
            att = np.empty((T, H, D), dtype=np.float32)
            probs = np.empty((H, T, T), dtype=np.float32) if record is not None else None
            for hh in range(H):
                kv = hh // g
                m = mask
                if last_keeps is not None and (li, kv) in last_keeps:
                    m = mask.copy()
                    m[-1, :-1] = -np.inf
                    m[-1, last_keeps[li, kv]] = 0.0
                s = (q[:, hh, :] @ k[:, kv, :].T) / np.float32(np.sqrt(D)) + m
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
        return np.ascontiguousarray(self._rms(x, self.out_norm) @ self.out.T, dtype=np.float32)
