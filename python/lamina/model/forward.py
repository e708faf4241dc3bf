"""The forward of a loaded model on its KV caches: logits, attention records, hidden states.

:class:`ModelForward` is the part of :class:`lamina.model.Model` that runs token ids through the
native forward (:mod:`lamina.model.native`, CPU or CUDA) after the tokens a cache holds: checked
ids, new caches, one call's logits and recorded attention, a batched decode step, the residual
stream, and KVzip's reconstruction scores. :class:`lamina.model.Model` sets its attributes when
it loads the file; generation (:mod:`lamina.model.generate`) builds on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import InvalidInput
from .calibration import ChannelScaling
from .generate import Prefill
from .gguf_file import LlamaConfig
from .native import NativeCache, NativeModel
from .position import MsPoE
from .press import reconstruction_scores
from .prompts import ChatPrompts

__all__ = ["ModelForward"]


class ModelForward(ChatPrompts):
    """Token ids through the native forward, after what a KV cache holds.

    Attributes
    ----------
    config : LlamaConfig
    threads : int
        Worker threads of the forward (0: lamina's default).
    q8_decode : bool
        Decode steps multiply with int8-quantised activations.
    device : {"cpu", "cuda"}
    position : {"rope", "ms-poe"}
    ms_poe : MsPoE or None
    channel : ChannelScaling or None

    Notes
    -----
    Thread-safe: the weights are read-only and every call works on its own KV cache.
    """

    config: LlamaConfig
    threads: int
    q8_decode: bool
    device: str
    position: str
    ms_poe: MsPoE | None
    channel: ChannelScaling | None
    _native: NativeModel

    def hidden_states(self, ids: Sequence[int] | npt.NDArray[Any]) -> npt.NDArray[np.float32]:
        """The residual stream after every layer: one full causal forward from position 0
        (the native forward, this model's settings), no cache kept.

        Parameters
        ----------
        ids : sequence of int, length T >= 1

        Returns
        -------
        ndarray, float32, shape (n_layers, T, d_model)

        Raises
        ------
        NotImplementedError
            On ``device="cuda"`` (the hidden states come from the CPU forward).
        """
        a = self._ids(ids)
        cache = _core.KVCache(self.config.n_layers, self.config.n_kv_heads, self.config.head_dim)
        _, hidden = self._cpu().forward_hidden(a, cache, "none", self.threads, self.q8_decode)
        return np.asarray(hidden, dtype=np.float32)

    def _cpu(self) -> _core.LlamaModel:
        """The native CPU model (what only the CPU forward offers: the hidden states)."""
        if not isinstance(self._native, _core.LlamaModel):
            raise NotImplementedError(f"this needs the CPU forward; the model runs on device={self.device!r}")
        return self._native

    # ---- forward ------------------------------------------------------------------------------
    def _ids(self, ids: Sequence[int] | npt.NDArray[Any]) -> npt.NDArray[np.int32]:
        a = np.asarray(ids)
        if a.ndim != 1 or a.size == 0:
            raise InvalidInput(f"ids must be a non-empty 1-D sequence of token ids, got shape {a.shape}")
        if a.dtype.kind not in "iu":
            raise InvalidInput(f"ids must be integers, got dtype {a.dtype}")
        V = self.config.vocab_size
        bad = np.flatnonzero((a < 0) | (a >= V))
        if bad.size:
            raise InvalidInput(f"token id {int(a[bad[0]])} at index {int(bad[0])} is outside the vocabulary [0, {V})")
        if a.size > self.config.context_length:
            raise InvalidInput(f"{a.size} tokens exceed the model's context of {self.config.context_length}")
        return np.ascontiguousarray(a, dtype=np.int32)

    def _check_room(self, cache: NativeCache, n: int) -> None:
        """Raise InvalidInput when ``n`` more tokens in ``cache`` would pass the model's context."""
        if cache.n_seen + n > self.config.context_length:
            raise InvalidInput(f"the cache would exceed the model's context of {self.config.context_length} tokens")

    def new_cache(self) -> NativeCache:
        """An empty KV cache for this model (ragged per layer and KV head; on the GPU, fp16,
        for a ``device="cuda"`` model)."""
        c = self.config
        if self.device == "cuda":
            return _core.CudaKVCache(c.n_layers, c.n_kv_heads, c.head_dim)
        return _core.KVCache(c.n_layers, c.n_kv_heads, c.head_dim)

    def logits(self, ids: Sequence[int] | npt.NDArray[Any]) -> npt.NDArray[np.float32]:
        """Logits of every position: one full causal forward from position 0, no cache kept.

        Parameters
        ----------
        ids : sequence of int, length T >= 1

        Returns
        -------
        ndarray, float32, shape (T, vocab_size)

        Raises
        ------
        InvalidInput
            Empty ids, an id outside the vocabulary, or more tokens than the context.
        """
        a = self._ids(ids)
        out, _, _ = self._native.forward(a, self.new_cache(), "all", self.threads, 0)
        assert out is not None
        return out

    @property
    def batched_decode(self) -> bool:
        """True when :meth:`forward_batch` runs (the CPU forward without Ms-PoE or channel
        scaling)."""
        return self.device == "cpu" and self.ms_poe is None and self.channel is None

    def forward_batch(self, ids: Sequence[int], caches: Sequence[NativeCache]) -> npt.NDArray[np.float32]:
        """One decode step of B independent sequences: token ``ids[b]`` is appended to
        ``caches[b]`` and attends over that cache alone. The matmuls run over the B rows
        together, so the weights are read once for all of them (one step of a B-token call
        instead of B single-token steps). The logits equal B separate :meth:`forward` calls
        up to the summation order (float32 activations) or the int8 activation rounding
        (``q8_decode`` / ``q8_prefill``, which may round a near-tie differently).

        Parameters
        ----------
        ids : sequence of int, length B >= 1
        caches : sequence of KVCache, length B
            Distinct caches of this model (:meth:`new_cache`, clones of one are fine).

        Returns
        -------
        ndarray, float32, shape (B, vocab_size)
            Row b: the next-token logits of sequence b.

        Raises
        ------
        InvalidInput
            Lengths that differ, no sequence, a repeated cache, an id outside the vocabulary,
            or a cache at the model's context.
        NotImplementedError
            On ``device="cuda"`` or with Ms-PoE or channel scaling (:attr:`batched_decode`).
        """
        if not self.batched_decode:
            raise NotImplementedError(
                "a batched decode runs on the CPU forward without Ms-PoE or channel scaling "
                f"(device={self.device!r}, position={self.position!r}, channel={self.channel is not None})"
            )
        if len(ids) != len(caches) or not ids:
            raise InvalidInput(f"need one cache per id and at least one, got {len(ids)} ids and {len(caches)} caches")
        if any(int(c.n_seen) + 1 > self.config.context_length for c in caches):
            raise InvalidInput(f"a cache would exceed the model's context of {self.config.context_length} tokens")
        native = self._cpu()
        try:
            return native.forward_batch(self._ids(ids), list(caches), self.threads, self.q8_decode)  # type: ignore[arg-type]
        except ValueError as e:
            raise InvalidInput(str(e)) from None

    def forward(
        self,
        ids: Sequence[int] | npt.NDArray[Any],
        cache: NativeCache,
        *,
        logits: str = "last",
        record_window: int = 0,
    ) -> tuple[npt.NDArray[np.float32] | None, npt.NDArray[np.float32] | None]:
        """Run ``ids`` after the tokens already in ``cache`` (which grows by len(ids) per head).

        Parameters
        ----------
        ids : sequence of int, length T >= 1
        cache : lamina._core.KVCache
            From :meth:`new_cache`.
        logits : {"last", "all", "none"}
            Logits of the last token (shape (V,)), of every token (T, V), or none.
        record_window : int
            Record the attention of the last ``record_window`` queries: (L, H, w, S), S the
            cache length after the call (needs an uncompacted cache).

        Returns
        -------
        (logits or None, attention or None)
        """
        self._check_room(cache, len(ids))
        out, att, _ = self._native.forward(
            self._ids(ids), cache, logits, self.threads, int(record_window), self.q8_decode
        )
        return out, att

    def reconstruction_scores(
        self, cache: NativeCache, ids: Sequence[int] | npt.NDArray[Any], *, chunk: int = 2048
    ) -> npt.NDArray[np.float32]:
        """KVzip's scores, (L, H, S) float32, of ``cache`` holding exactly ``ids`` (S tokens):
        the largest attention each entry gets while the model repeats the context on a clone
        (see :func:`lamina.model.press.reconstruction_scores`; ``cache`` is unchanged)."""
        arr = self._ids(ids)
        if int(cache.n_seen) != len(arr) or int(cache.lengths().min()) != len(arr):
            raise InvalidInput(
                f"the cache must hold exactly the {len(arr)} ids, uncompressed (it has seen {cache.n_seen})"
            )
        return reconstruction_scores(
            self._native,
            cache,
            arr,
            self.repeat_instruction,
            context_length=self.config.context_length,
            threads=self.threads,
            q8_decode=self.q8_decode,
            chunk=chunk,
        )

    def prefill(
        self,
        ids: Sequence[int] | npt.NDArray[Any],
        cache: NativeCache,
        *,
        record_window: int = 0,
        accumulate: bool = False,
    ) -> Prefill:
        """Run ``ids`` after the tokens in ``cache``, keeping the last logits and, on request,
        the attention a press reads.

        Parameters
        ----------
        ids : sequence of int, length T >= 1
        cache : lamina._core.KVCache
            Every head must hold the same number of entries to record attention.
        record_window : int
            Record the softmax rows of the last ``record_window`` (<= T) queries.
        accumulate : bool
            Also sum every query's softmax row per entry (H2O's accumulated attention).

        Returns
        -------
        Prefill
        """
        self._check_room(cache, len(ids))
        out, att, acc = self._native.forward(
            self._ids(ids), cache, "last", self.threads, int(record_window), self.q8_decode, bool(accumulate)
        )
        assert out is not None
        return Prefill(logits=out, attention=att, accumulated=acc)
