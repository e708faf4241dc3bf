"""The :class:`Model` that ``lamina.model.load`` (:mod:`lamina.model.loading`) returns."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import InvalidInput
from ..kv import KVMethod
from .calibration import ChannelScaling, model_identity
from .chat_template import render_messages, render_user_message
from .generate import Generation, KVBudget, Prefill, PromptParts, continue_generation, run_generation
from .gguf_file import GGUFModelFile, LlamaConfig
from .native import NativeCache, NativeModel
from .position import HeadSet, MsPoE, copy_head_scores, probe_ids, select_copy_heads
from .press import REPEAT_INSTRUCTION, reconstruction_scores, resolve_press
from .sampling import Sampler
from .tokenizer import Tokenizer
from .weights import cuda_model, native_model, weight_bytes

__all__ = ["Model"]

#: Where the forward runs: the CPU runtime, or (CUDA builds) the fp16 device forward.
DEVICES = ("cpu", "cuda")

#: Separator between a context and its question inside the one user message.
QUESTION_SEPARATOR = "\n\n"


def _check_cuda() -> None:
    """Raise, saying why, when ``device="cuda"`` cannot run here."""
    if not _core.has_cuda():
        raise RuntimeError(
            "device='cuda' needs a CUDA build of lamina: this build has no CUDA backend "
            "(reinstall with LAMINA_CUDA=ON where nvcc is installed), or use device='cpu'"
        )
    if _core.cuda_device_count() == 0:
        raise RuntimeError("device='cuda': no usable CUDA device (no GPU or no driver); use device='cpu'")


class Model:
    """A llama-architecture GGUF model on lamina's native runtime.

    Parameters
    ----------
    file : GGUFModelFile
        The opened file (:func:`lamina.model.read_gguf`).
    threads : int
        Worker threads of the forward (0: lamina's default, ``lamina.set_num_threads``).
    q8_decode : bool
        Decode steps (fewer than 4 new tokens) multiply the quantised weights with the
        activation quantised to int8 per block of 32, as llama.cpp does (integer dot products,
        faster; logits drift from float32 by a mean KL of about 0.005). False keeps the
        activation in float32.
    q8_prefill : bool
        The same for the prefill (4 or more tokens per call, :meth:`logits` included): an
        integer GEMM on the packed weights (default), or float32 activations on dequantised
        weight panels (False: the float32 reference's numbers up to rounding).
    ms_poe : MsPoE, optional
        Rescale positions per head (Ms-PoE, :mod:`lamina.model.position`). Every cache
        is ranked on its first forward, which must start from an empty cache: the heads are
        scored on that call's last row (with ``generate(question=...)`` the context's last
        token, since the context is prefilled alone). The cache holds a second, rescaled copy
        of every key (KV memory ×1.5). On CUDA, copy heads are found on the plain CPU model.
    channel : ChannelScaling, optional
        Single-channel hidden-state scaling (:mod:`lamina.model.calibration`; not with
        ``ms_poe``). With ``last_tokens`` >= 1 a cache keeps a second, scaled copy of every
        key from its first forward (KV memory ×1.5). On CUDA the channel's column of the fp16
        query / key weights is used, and the attention record under ``last_tokens`` >= 1
        raises NotImplementedError.
    device : {"cpu", "cuda"}
        "cuda": the forward on the GPU (CUDA builds; every matrix dequantised to fp16 on
        upload, float32 activations; ``threads``, ``q8_decode`` and ``q8_prefill`` do not
        apply). Caches live in device memory (``kv_bytes`` is device bytes). Presses run
        on the device cache: the attention record of the window methods (SnapKV, Ada-KV,
        PyramidKV, LAVa, CriticalKV) is computed on the host from the device's window queries
        and the cache's keys, KeyDiff and StreamingLLM read the keys, and the kept entries are
        gathered on the device; H2O and KVzip (accumulated attention) and the record under
        Ms-PoE or last-tokens channel scaling raise NotImplementedError. The CUDA path was
        compiled for sm_80/sm_90 but has not yet run on a GPU in this repository's history.

    Attributes
    ----------
    config : LlamaConfig
    tokenizer : Tokenizer
    path : pathlib.Path
    position : {"rope", "ms-poe"}
    device : {"cpu", "cuda"}
    ms_poe : MsPoE or None
    channel : ChannelScaling or None
    copy_heads : frozenset of (layer, query head)
        The heads Ms-PoE keeps at ratio 1 (empty unless ``ms_poe.copy_heads``).

    Notes
    -----
    Thread-safe: the weights are read-only and every call works on its own KV cache.
    """

    def __init__(
        self,
        file: GGUFModelFile,
        *,
        threads: int = 0,
        q8_decode: bool = True,
        q8_prefill: bool = True,
        ms_poe: MsPoE | None = None,
        channel: ChannelScaling | None = None,
        device: str = "cpu",
    ) -> None:
        if channel is not None and ms_poe is not None:
            raise InvalidInput("channel scaling cannot be combined with Ms-PoE")
        self._file = file
        self.path = file.path
        self.config: LlamaConfig = file.config
        self.tokenizer = Tokenizer(file.tokenizer)
        self.threads = int(threads)
        self.q8_decode = bool(q8_decode)
        self.position = "rope" if ms_poe is None else "ms-poe"
        self.ms_poe = ms_poe
        self.copy_heads: HeadSet = frozenset()
        if device not in DEVICES:
            raise InvalidInput(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
        self.device = device
        if device == "cuda":
            _check_cuda()
        find_heads = ms_poe is not None and not isinstance(ms_poe.copy_heads, frozenset) and bool(ms_poe.copy_heads)
        if ms_poe is None or find_heads:  # the plain model (Ms-PoE finds its copy heads on it, on the CPU)
            self._native: NativeModel = (
                native_model(file, q8_prefill=q8_prefill) if device == "cpu" or find_heads else cuda_model(file)
            )
        if ms_poe is not None:
            if isinstance(ms_poe.copy_heads, frozenset):
                self.copy_heads = ms_poe.copy_heads
            elif find_heads:
                self.copy_heads = self._find_copy_heads(ms_poe.copy_threshold)
            c = self.config
            position = ms_poe.native(c.n_layers, c.n_heads, self.copy_heads)
            self._native = (
                native_model(file, position, q8_prefill=q8_prefill) if device == "cpu" else cuda_model(file, position)
            )
        eos = {i for i in (file.tokenizer.eos_id,) if i is not None}
        for name in ("<|im_end|>", "<|eot_id|>", "<|endoftext|>"):
            if name in file.tokenizer.tokens:
                i = file.tokenizer.tokens.index(name)
                if i in self.tokenizer.special_ids:
                    eos.add(i)
        self.eos_ids = frozenset(eos)
        self.channel: ChannelScaling | None = None
        self.set_channel(channel)

    def set_channel(self, scaling: ChannelScaling | None) -> None:
        """Set (or with None remove) single-channel scaling on the native forward. Caches
        filled before keep their keys: start new ones. Not thread-safe (set it before sharing
        the model).

        Raises
        ------
        InvalidInput
            Layers outside [0, n_layers), a channel outside [0, d_model), a non-finite factor,
            negative last_tokens, or a model with Ms-PoE.
        """
        if scaling is not None and not isinstance(scaling, ChannelScaling):
            raise TypeError(f"scaling must be a ChannelScaling, got {type(scaling).__name__}")
        try:
            self._native.set_channel_scaling(None if scaling is None else scaling.native())
        except ValueError as e:
            raise InvalidInput(str(e)) from None
        self.channel = scaling

    def identity(self) -> dict[str, Any]:
        """The model file's identity a calibration is checked against
        (:func:`lamina.model.calibration.model_identity`)."""
        return model_identity(self._file)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without a BOS (a continuation of a prompt)."""
        return self.tokenizer.encode(text, add_bos=False)

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

    def __repr__(self) -> str:
        c = self.config
        return (
            f"Model({self._file.name!r}, {c.n_layers} layers, d={c.d_model}, heads {c.n_heads}/{c.n_kv_heads}, "
            f"vocab {c.vocab_size}, kernels {'cuda (fp16)' if self.device == 'cuda' else self.kernel_isa})"
        )

    def _find_copy_heads(self, threshold: float) -> HeadSet:
        """Previous-token and induction heads of the plain model (:func:`copy_head_scores` on a
        probe of 64 random tokens repeated)."""
        half = 64
        ids = probe_ids(self.config.vocab_size, half=half)
        c = self.config
        cache = _core.KVCache(c.n_layers, c.n_kv_heads, c.head_dim)  # the plain CPU model's
        _, att, _ = self._native.forward(ids, cache, "none", self.threads, len(ids), False)
        assert att is not None
        previous, induction = copy_head_scores(att, half)
        return select_copy_heads(previous, induction, threshold)

    @property
    def kernel_isa(self) -> str:
        """The instruction set the native kernels run on (``"avx512"``, ``"avx2"``, ``"scalar"``)."""
        return str(_core.LlamaModel.kernel_isa)

    @property
    def weight_bytes(self) -> int:
        """Bytes of the stored (quantised) weights."""
        return weight_bytes(self._file)

    # ---- text ---------------------------------------------------------------------------------
    @functools.cached_property
    def repeat_instruction(self) -> list[int]:
        """Token ids (no BOS) of the instruction KVzip's reconstruction pass runs before the
        repeated context (:data:`lamina.model.press.REPEAT_INSTRUCTION`)."""
        return self.tokenizer.encode(REPEAT_INSTRUCTION, add_bos=False)

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text``, with the BOS the model expects (none for SmolLM2); control
        tokens written in the text (``<|im_start|>``) become their ids."""
        return self.tokenizer.encode(text)

    def detokenize(self, ids: Sequence[int]) -> str:
        """Text of token ids (control tokens written out)."""
        return self.tokenizer.decode(ids)

    def chat_prompt(self, message: str) -> str:
        """The prompt text of one user message under the model's chat template."""
        t = self._file.tokenizer
        bos = t.tokens[t.bos_id] if t.bos_id is not None else ""
        eos = t.tokens[t.eos_id] if t.eos_id is not None else ""
        return render_user_message(t.chat_template, message, bos_token=bos, eos_token=eos)

    def chat_messages_prompt(self, messages: Sequence[Mapping[str, str]]) -> str:
        """The prompt text of a conversation (system/user/assistant messages, in order) under
        the model's chat template, ending with the opening of the assistant's turn."""
        t = self._file.tokenizer
        bos = t.tokens[t.bos_id] if t.bos_id is not None else ""
        eos = t.tokens[t.eos_id] if t.eos_id is not None else ""
        return render_messages(t.chat_template, messages, bos_token=bos, eos_token=eos)

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
        if cache.n_seen + len(ids) > self.config.context_length:
            raise InvalidInput(f"the cache would exceed the model's context of {self.config.context_length} tokens")
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
        if cache.n_seen + len(ids) > self.config.context_length:
            raise InvalidInput(f"the cache would exceed the model's context of {self.config.context_length} tokens")
        out, att, acc = self._native.forward(
            self._ids(ids), cache, "last", self.threads, int(record_window), self.q8_decode, bool(accumulate)
        )
        assert out is not None
        return Prefill(logits=out, attention=att, accumulated=acc)

    def continue_from(
        self,
        cache: NativeCache,
        logits: npt.NDArray[np.float32],
        *,
        suffix: Sequence[int] = (),
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        n_prompt: int | None = None,
    ) -> Generation:
        """Greedy generation from a cache the caller filled (and perhaps compressed).

        Parameters
        ----------
        cache : lamina._core.KVCache
            Holds the prompt so far; it grows by the suffix and the generated tokens.
        logits : ndarray, float32, shape (vocab_size,)
            Logits of the last token in ``cache`` (used when ``suffix`` is empty).
        suffix : sequence of int
            Token ids run first (e.g. the question after a query-agnostic press).
        max_tokens : int
        stop : sequence of str
        n_prompt : int, optional
            Prompt tokens to report (default: ``cache.n_seen`` after the suffix).

        Returns
        -------
        Generation
        """
        if int(max_tokens) < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
        if isinstance(stop, str):
            stop = (stop,)
        if cache.n_seen + len(suffix) + int(max_tokens) > self.config.context_length:
            raise InvalidInput(f"the cache would exceed the model's context of {self.config.context_length} tokens")
        if suffix:
            logits = self.prefill(suffix, cache).logits
        return continue_generation(
            self._native,
            cache,
            logits,
            decode=self.tokenizer.decode,
            eos_ids=self.eos_ids,
            max_tokens=int(max_tokens),
            sampler=Sampler(temperature=0.0),
            stop=list(stop),
            on_text=None,
            threads=self.threads,
            q8_decode=self.q8_decode,
            n_prompt=int(cache.n_seen if n_prompt is None else n_prompt),
        )

    # ---- generation ---------------------------------------------------------------------------
    def prompt_parts(self, prompt: str, question: str | None = None) -> PromptParts:
        """Token ids of ``prompt`` (and ``question``) as one user message under the chat
        template; with a question, the ids are split where the question starts."""
        if not isinstance(prompt, str) or (question is not None and not isinstance(question, str)):
            raise TypeError("prompt and question must be str")
        if not prompt.strip() or (question is not None and not question.strip()):
            raise InvalidInput("prompt (and question, when given) must be non-empty text")
        if question is None:
            return PromptParts(context=self.tokenize(self.chat_prompt(prompt)), suffix=[])
        rendered = self.chat_prompt(prompt + QUESTION_SEPARATOR + question)
        cut = rendered.find(prompt) + len(prompt)
        return PromptParts(
            context=self.tokenize(rendered[:cut]), suffix=self.tokenizer.encode(rendered[cut:], add_bos=False)
        )

    def generate(
        self,
        prompt: str,
        *,
        question: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        press: str | KVMethod | None = None,
        compression: float = 0.0,
        stop: Sequence[str] = (),
        on_text: Callable[[str], None] | None = None,
        kv_budget: int | None = None,
        prefill_chunk: int | None = None,
        press_every: int = 32,
    ) -> Generation:
        """Generate the assistant's reply to ``prompt`` (one user message under the chat template).

        Parameters
        ----------
        prompt : str
            The user message (the context, when ``question`` is given).
        question : str, optional
            Appended after the press: the context is prefilled and compressed alone
            (query-agnostic, kvpress's setting). Without it the press sees the whole prompt.
        max_tokens : int
            Budget of generated tokens (the model's own tokens; >= 1).
        temperature, top_p, seed
            Sampling (:class:`lamina.model.sampling.Sampler`); temperature 0 is greedy.
        press : str or lamina.kv.KVMethod, optional
            A ``lamina.kv`` method (``"snapkv"``, ``"streaming"``, ``"h2o"``, ``"adakv"``,
            ``"pyramidkv"``, ``"lava"``, ``"keydiff"``, ``"criticalkv"``,
            ``"adakv_criticalkv"`` or an instance) applied once after prefill.
        compression : float
            Fraction of the prefilled cache removed, in [0, 1) (0: no press). Not with
            ``kv_budget``.
        kv_budget : int, optional
            A fixed budget: from the end of the context on, at most this many entries per
            (layer, KV head) are held, the question and decoding included (``press``
            required); room for exactly the budget is allocated once, so
            ``Generation.kv_bytes`` is the budget's bytes. A method that scores from the
            cache alone (``"keydiff"``, ``"streaming"``) re-presses as the cache grows: after
            each prefill chunk and about every ``press_every`` generated tokens. Any other
            method presses once after the context, down to ``kv_budget`` minus the question
            and ``max_tokens``.
        prefill_chunk : int, optional
            With ``kv_budget`` and a cache-scored method: prefill the context this many tokens
            at a time, compressing after each chunk, so a context longer than the budget is
            compressed as it is read (the cache peaks at ``kv_budget + prefill_chunk``
            entries per head; without chunks it holds the whole context before the press;
            ``Generation.peak_kv_bytes`` reports the peak).
        press_every : int
            Decoding re-presses a head that reaches ``kv_budget`` down to
            ``kv_budget - press_every`` (at least half the budget).
        stop : sequence of str
            Generation ends before the first occurrence of any of these strings.
        on_text : callable, optional
            Streaming: called with each new piece of text as it is generated.

        Returns
        -------
        Generation

        Raises
        ------
        InvalidInput
            max_tokens < 1, compression outside [0, 1), bad sampling parameters, an empty stop
            string, a prompt that does not fit the context, or a bad ``kv_budget`` setting
            (no press, compression given too, chunked prefill with an attention-scored method).
        """
        if int(max_tokens) < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
        if not 0.0 <= float(compression) < 1.0:
            raise InvalidInput(f"compression must be in [0, 1), got {compression}")
        if isinstance(stop, str):
            stop = (stop,)
        if any(not s for s in stop):
            raise InvalidInput("stop strings must be non-empty")
        method = resolve_press(press) if press is not None else None
        budget = None
        if kv_budget is not None:
            if compression != 0.0:
                raise InvalidInput("give either compression (one press after prefill) or kv_budget, not both")
            if isinstance(kv_budget, bool) or not isinstance(kv_budget, int):
                raise TypeError(f"kv_budget must be an int (entries per KV head), got {type(kv_budget).__name__}")
            budget = KVBudget(tokens=kv_budget, prefill_chunk=prefill_chunk, press_every=int(press_every))
        elif prefill_chunk is not None:
            raise InvalidInput("prefill_chunk needs kv_budget (the budget each chunk is compressed to)")
        if method is not None and compression == 0.0 and budget is None:
            method = None
        parts = self.prompt_parts(prompt, question)
        return run_generation(
            self._native,
            self.new_cache(),
            parts,
            decode=self.tokenizer.decode,
            eos_ids=self.eos_ids,
            max_tokens=int(max_tokens),
            sampler=Sampler(temperature=float(temperature), top_p=float(top_p), seed=seed),
            press=method,
            compression=float(compression),
            stop=list(stop),
            on_text=on_text,
            context_length=self.config.context_length,
            threads=self.threads,
            q8_decode=self.q8_decode,
            budget=budget,
            instruction=self.repeat_instruction,
        )

    def generate_messages(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        stop: Sequence[str] = (),
    ) -> Generation:
        """Generate the assistant's reply to a conversation (no press).

        Parameters
        ----------
        messages : sequence of mapping
            ``{"role": "system" | "user" | "assistant", "content": str}``, rendered in order
            by :meth:`chat_messages_prompt`.
        max_tokens, temperature, top_p, seed, stop
            As in :meth:`generate`.

        Returns
        -------
        Generation

        Raises
        ------
        InvalidInput
            Bad messages, max_tokens < 1, bad sampling parameters, an empty stop string, or
            a prompt that does not fit the context with ``max_tokens``.
        """
        if int(max_tokens) < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
        if isinstance(stop, str):
            stop = (stop,)
        if any(not s for s in stop):
            raise InvalidInput("stop strings must be non-empty")
        ids = self.tokenize(self.chat_messages_prompt(messages))
        return run_generation(
            self._native,
            self.new_cache(),
            PromptParts(context=ids, suffix=[]),
            decode=self.tokenizer.decode,
            eos_ids=self.eos_ids,
            max_tokens=int(max_tokens),
            sampler=Sampler(temperature=float(temperature), top_p=float(top_p), seed=seed),
            press=None,
            compression=0.0,
            stop=list(stop),
            on_text=None,
            context_length=self.config.context_length,
            threads=self.threads,
            q8_decode=self.q8_decode,
        )
