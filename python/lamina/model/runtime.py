"""The :class:`Model` that ``lamina.model.load`` (:mod:`lamina.model.loading`) returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import _core
from ..errors import InvalidInput
from ..kv import KVMethod
from .calibration import ChannelScaling, model_identity
from .forward import ModelForward
from .generate import (
    Decoding,
    Generation,
    KVBudget,
    PromptParts,
    check_limits,
    continue_generation,
    run_generation,
)
from .gguf_file import GGUFModelFile, LlamaConfig
from .native import NativeCache, NativeModel
from .position import HeadSet, MsPoE, copy_head_scores, probe_ids, select_copy_heads
from .press import resolve_press
from .sampling import Sampler
from .weights import cuda_model, native_model, weight_bytes

__all__ = ["Model"]

#: Where the forward runs: the CPU runtime, or (CUDA builds) the fp16 device forward.
DEVICES = ("cpu", "cuda")


def _check_cuda() -> None:
    """Raise, saying why, when ``device="cuda"`` cannot run here."""
    if not _core.has_cuda():
        raise RuntimeError(
            "device='cuda' needs a CUDA build of lamina: this build has no CUDA backend "
            "(reinstall with LAMINA_CUDA=ON where nvcc is installed), or use device='cpu'"
        )
    if _core.cuda_device_count() == 0:
        raise RuntimeError("device='cuda': no usable CUDA device (no GPU or no driver); use device='cpu'")


class Model(ModelForward):
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
        super().__init__(file)
        self.path = file.path
        self.config: LlamaConfig = file.config
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
        self._check_room(cache, len(suffix) + int(max_tokens))
        if suffix:
            logits = self.prefill(suffix, cache).logits
        dec = self._decoding(max_tokens, Sampler(temperature=0.0), list(stop), None)
        return continue_generation(
            self._native, cache, logits, dec, n_prompt=int(cache.n_seen if n_prompt is None else n_prompt)
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
        stops = check_limits(max_tokens, stop)
        if not 0.0 <= float(compression) < 1.0:
            raise InvalidInput(f"compression must be in [0, 1), got {compression}")
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
        sampler = Sampler(temperature=float(temperature), top_p=float(top_p), seed=seed)
        return self._run(
            parts, stops, max_tokens, sampler, on_text=on_text, press=method, compression=compression, budget=budget
        )

    def _run(
        self,
        parts: PromptParts,
        stops: list[str],
        max_tokens: int,
        sampler: Sampler,
        *,
        on_text: Callable[[str], None] | None = None,
        press: KVMethod | None = None,
        compression: float = 0.0,
        budget: KVBudget | None = None,
    ) -> Generation:
        """Generate into a new cache with this model's tokenizer, threads and context."""
        return run_generation(
            self._native,
            self.new_cache(),
            parts,
            self._decoding(max_tokens, sampler, stops, on_text),
            press=press,
            compression=float(compression),
            context_length=self.config.context_length,
            budget=budget,
            instruction=self.repeat_instruction if press is not None else (),
        )

    def _decoding(
        self, max_tokens: int, sampler: Sampler, stops: list[str], on_text: Callable[[str], None] | None
    ) -> Decoding:
        """This model's :class:`Decoding` with these limits."""
        return Decoding(
            decode=self.tokenizer.decode,
            eos_ids=self.eos_ids,
            max_tokens=int(max_tokens),
            sampler=sampler,
            stop=stops,
            on_text=on_text,
            threads=self.threads,
            q8_decode=self.q8_decode,
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
        stops = check_limits(max_tokens, stop)
        ids = self.tokenize(self.chat_messages_prompt(messages))
        return self._run(
            PromptParts(context=ids, suffix=[]),
            stops,
            max_tokens,
            Sampler(temperature=float(temperature), top_p=float(top_p), seed=seed),
        )
