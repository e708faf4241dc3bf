"""Single-channel hidden-state scaling: the channel search and its per-model calibration file.

Yu et al. (2024, "Mitigate Position Bias in Large Language Models via Scaling a Single
Dimension", arXiv 2406.02536) find one channel of the residual stream that carries absolute
position, and scale it in the middle layers' attention input — the layer's RMSNorm output,
before the query and key projections — for the last query (``last_tokens=1``) or for every
position. lamina's forward applies it natively (``cpp/model.cpp``, :class:`ChannelScaling`);
this module finds the channel and the factor for a model:

1. **statistics** (:func:`candidate_channels`): the residual stream after every layer, averaged
   over a seeded corpus of random strings (:func:`random_string_corpus`), is examined per
   channel and layer (layers 2 … L−2, as the released code does): a degree-3 polynomial fitted
   over the positions (the first ``skip_first`` left out) is monotonic or not; a channel counts
   the layers where it rises or the layers where it falls, whichever is more, and stays a
   candidate when that count exceeds L/4. Candidates are ranked by smoothness — the sum of the
   squared second difference of the min-max normalised, Savitzky–Golay smoothed curve, the
   smallest over the channel's monotonic layers — and the ``top`` smoothest are kept;
2. **selection** (:func:`calibrate`): every candidate at every factor of :data:`FACTORS`
   scores the mean cross-entropy of the answer tokens on a small set of key-value retrievals
   (:func:`calibration_set`, seeds disjoint from ``lamina eval position``'s), teacher-forced with
   the answer's tokens and the prompt's last token read through the scaled channel (the released
   code's validation: ``last_recompute_tokens = len(answer) + 1``); the best pair is then also
   scored with every position scaled, and the lower loss decides the positions.

The result is a :class:`Calibration`, saved as a small JSON file per model (the model is
identified by its file name, size and a checksum of two tensors), which
``lamina.model.load(calibration=PATH)`` applies.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..errors import InvalidInput
from .gguf_file import GGUFModelFile, LlamaConfig

__all__ = [
    "FACTORS",
    "CALIBRATION_SEED_BASE",
    "ChannelScaling",
    "Candidate",
    "Calibration",
    "middle_layers",
    "model_identity",
    "random_string_corpus",
    "calibration_set",
    "KVExample",
    "monotonic_layers",
    "smoothness",
    "candidate_channels",
    "calibrate",
    "total_steps",
]

#: The factors the selection tries (the paper's search space; its shipped configs use 0 and −1).
FACTORS: tuple[float, ...] = (0.5, 0.0, -0.5, -1.0)

#: Calibration prompts are drawn from seeds ``CALIBRATION_SEED_BASE + seed`` (strings
#: ``"calibration:<n>:<i>"``), a namespace ``lamina eval position`` (``"<seed>:<suite>:..."``)
#: never draws from.
CALIBRATION_SEED_BASE = 1_000_000

_FORMAT = 1


@dataclass(frozen=True)
class ChannelScaling:
    """Where and how the forward scales one channel (see ``cpp/lamina/model.hpp``).

    Attributes
    ----------
    channel : int
        In [0, d_model).
    factor : float
        The channel of the attention input is multiplied by it.
    first_layer, last_layer : int
        Layers [first_layer, last_layer).
    last_tokens : int
        0: every query and key; n >= 1: the last n queries of each forward call (a decode step
        is one call: every generated token) read the scaled queries and keys.
    """

    channel: int
    factor: float
    first_layer: int
    last_layer: int
    last_tokens: int = 1

    def native(self) -> dict[str, Any]:
        """The dict ``_core.LlamaModel.set_channel_scaling`` takes."""
        return {
            "first_layer": int(self.first_layer),
            "last_layer": int(self.last_layer),
            "channel": int(self.channel),
            "factor": float(self.factor),
            "last_tokens": int(self.last_tokens),
        }


@dataclass(frozen=True)
class Candidate:
    """One channel the statistics kept, with its selection losses.

    Attributes
    ----------
    channel : int
    monotonic_layers : list of int
        The layers where its fitted curve is monotonic (the majority direction).
    smoothness : float
        Smallest squared-second-difference sum over those layers (lower: smoother).
    losses : dict of str to float
        Mean answer cross-entropy (nats per token) per factor (keys ``str(factor)``).
    """

    channel: int
    monotonic_layers: list[int]
    smoothness: float
    losses: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Calibration:
    """A model's calibrated single-channel scaling.

    Attributes
    ----------
    model : dict
        Identity of the model file (:func:`model_identity`: name, bytes, checksum).
    scaling : ChannelScaling
        What the forward applies.
    baseline_loss : float
        Mean answer cross-entropy without scaling on the calibration set.
    loss : float
        The same with ``scaling``.
    all_positions_loss : float
        The chosen (channel, factor) with every position scaled (the ``last_tokens`` decision).
    candidates : list of Candidate
        The statistics' top channels and their losses per factor.
    settings : dict
        How it was computed (corpus, samples, seed, lengths, skip_first).
    """

    model: dict[str, Any]
    scaling: ChannelScaling
    baseline_loss: float
    loss: float
    all_positions_loss: float
    candidates: list[Candidate]
    settings: dict[str, Any]

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the calibration as JSON (a few kB)."""
        data = {"format": _FORMAT, **asdict(self)}
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Calibration:
        """Read a file :meth:`save` wrote.

        Raises
        ------
        FileNotFoundError
            No file at ``path``.
        InvalidInput
            Not a calibration file of this format (the message says what is wrong).
        """
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise InvalidInput(f"{path}: not a calibration file (invalid JSON: {e})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise InvalidInput(f"{path}: not a lamina channel calibration (format {_FORMAT})")
        try:
            return cls(
                model=dict(data["model"]),
                scaling=ChannelScaling(**data["scaling"]),
                baseline_loss=float(data["baseline_loss"]),
                loss=float(data["loss"]),
                all_positions_loss=float(data["all_positions_loss"]),
                candidates=[Candidate(**c) for c in data["candidates"]],
                settings=dict(data["settings"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise InvalidInput(f"{path}: malformed calibration file ({e!r})") from None

    def check_model(self, file: GGUFModelFile) -> None:
        """Raise InvalidInput unless ``file`` is the model this calibration was made for."""
        here = model_identity(file)
        if here != self.model:
            raise InvalidInput(
                f"this calibration was made for {self.model.get('file')!r} ({self.model.get('bytes')} bytes, "
                f"checksum {str(self.model.get('checksum'))[:12]}), not for {here['file']!r} "
                f"({here['bytes']} bytes, checksum {here['checksum'][:12]}): run `lamina model calibrate` for it"
            )


def model_identity(file: GGUFModelFile) -> dict[str, Any]:
    """Name, size in bytes and a SHA-256 of ``output_norm.weight`` and ``blk.0.attn_q.weight``
    of a model file: a calibration applies to this exact file.

    Returns
    -------
    dict with keys ``file``, ``bytes``, ``checksum``
    """
    h = hashlib.sha256()
    for name in ("output_norm.weight", "blk.0.attn_q.weight"):
        t = file.tensors.get(name)
        if t is not None:
            h.update(name.encode())
            h.update(np.ascontiguousarray(t.data).tobytes())
    return {"file": file.path.name, "bytes": int(os.path.getsize(file.path)), "checksum": h.hexdigest()}


def middle_layers(n_layers: int) -> tuple[int, int]:
    """The paper's layers 10–25 of 32 scaled to ``n_layers``: [round(10 L / 32), round(26 L / 32))."""
    if n_layers < 1:
        raise ValueError(f"n_layers must be >= 1, got {n_layers}")
    first = int(round(10 * n_layers / 32))
    last = max(first + 1, int(round(26 * n_layers / 32)))
    return min(first, n_layers - 1), min(last, n_layers)


# ---- data ------------------------------------------------------------------------------------
_ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
_KV_HEAD = "Extract the value corresponding to the specified key in the JSON object below.\n\nJSON data:\n"


def random_string_corpus(n: int, chars: int, *, seed: int = 0) -> list[str]:
    """``n`` seeded texts of ``chars`` characters: random words of 3–10 letters and digits
    separated by spaces (no position-specific content, so a channel's trend over positions is
    the position's)."""
    rng = random.Random(f"corpus:{seed}")
    out = []
    for _ in range(n):
        words: list[str] = []
        size = 0
        while size < chars:
            w = "".join(rng.choice(_ALPHABET) for _ in range(rng.randint(3, 10)))
            words.append(w)
            size += len(w) + 1
        out.append(" ".join(words)[:chars])
    return out


@dataclass(frozen=True)
class KVExample:
    """One calibration retrieval: a user message, the reply's opening and the gold continuation."""

    prompt: str
    answer_prefix: str
    answer: str
    position: float


def calibration_set(n: int, *, count: Callable[[str], int], length: int = 512, seed: int = 0) -> list[KVExample]:
    """``n`` UUID key-value retrievals of about ``length`` tokens (``count``: prompt text ->
    tokens), the gold key at positions 0, 0.25, 0.5, 0.75, 1 in turn. The format is
    ``lamina eval position``'s ``uuid`` suite; the seeds (``"calibration:<seed>:<i>"``,
    :data:`CALIBRATION_SEED_BASE`) are not the evaluation's."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    out = []
    for i in range(n):
        rng = random.Random(f"calibration:{CALIBRATION_SEED_BASE + seed}:{i}")
        items = [
            (str(uuid.UUID(int=rng.getrandbits(128))), str(uuid.UUID(int=rng.getrandbits(128)))) for _ in range(512)
        ]

        def render(k: int, gold: int, items: list[tuple[str, str]] = items) -> tuple[str, str, str]:
            body = json.dumps(dict(items[:k]), indent=1)
            key, value = items[gold]
            q = f'Key: "{key}"\nWhat is the value associated with this key?'
            return f"{_KV_HEAD}{body}\n\n{q}", f'The value associated with "{key}" is "', f'{value}"'

        lo, hi = 2, len(items)
        while lo < hi:  # the most items that fit in `length` tokens
            mid = (lo + hi + 1) // 2
            if count(render(mid, 0)[0]) <= length:
                lo = mid
            else:
                hi = mid - 1
        position = (i % 5) / 4
        gold = int(round(position * (lo - 1)))
        prompt, prefix, answer = render(lo, gold)
        out.append(KVExample(prompt, prefix, answer, position))
    return out


# ---- statistics ------------------------------------------------------------------------------
def _savgol(x: npt.NDArray[np.float64], window: int, order: int) -> npt.NDArray[np.float64]:
    """Savitzky–Golay smoothing of the columns of x (T, n): each point the value at the centre
    of a degree-``order`` least-squares fit over ``window`` neighbours (odd); edges padded by
    reflection."""
    half = window // 2
    offs = np.arange(-half, half + 1, dtype=np.float64)
    coef = np.linalg.pinv(np.vander(offs, order + 1, increasing=True))[0]  # value at offset 0
    pad = np.pad(x, ((half, half), (0, 0)), mode="reflect")
    out = np.zeros_like(x)
    for j, c in enumerate(coef):
        out += c * pad[j : j + x.shape[0]]
    return out


def _normalise(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    lo, hi = x.min(axis=0), x.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    out: npt.NDArray[np.float64] = (x - lo) / span
    return out


def monotonic_layers(
    hidden: npt.NDArray[np.floating[Any]], *, skip_first: int = 64, degree: int = 3
) -> list[list[int]]:
    """Per channel, the layers where a degree-``degree`` polynomial fitted over the positions
    is monotonic — the rising layers or the falling ones, whichever are more (the released
    code's rule; layers 2 … L−2 examined).

    Parameters
    ----------
    hidden : ndarray, shape (L, T, d)
        Residual stream after each layer (averaged over a corpus), T > skip_first + degree + 1.
    skip_first : int
        Positions left out at the start (attention sinks dominate them).

    Returns
    -------
    list of d lists of int
    """
    L, T, d = hidden.shape
    if T - skip_first < degree + 2:
        raise ValueError(f"{T} positions leave too few after skip_first={skip_first} for a degree-{degree} fit")
    x = np.arange(T - skip_first, dtype=np.float64)
    x = x / max(1.0, x[-1])
    up: list[list[int]] = [[] for _ in range(d)]
    down: list[list[int]] = [[] for _ in range(d)]
    for layer in range(2, max(2, L - 1)):
        y = _normalise(hidden[layer, skip_first:].astype(np.float64))
        coef = np.polyfit(x, y, degree)  # (degree + 1, d), highest power first
        fit = np.vander(x, degree + 1) @ coef
        dy = np.diff(fit, axis=0)
        flat = np.ptp(hidden[layer, skip_first:], axis=0) == 0
        for c in np.flatnonzero(np.all(dy >= 0, axis=0) & ~flat):
            up[int(c)].append(layer)
        for c in np.flatnonzero(np.all(dy <= 0, axis=0) & ~flat):
            down[int(c)].append(layer)
    return [u if len(u) > len(w) else w for u, w in zip(up, down, strict=True)]


def smoothness(curve: npt.NDArray[np.floating[Any]], *, window: int = 11, order: int = 3) -> npt.NDArray[np.float64]:
    """Sum over positions of the squared second difference of each min-max normalised,
    Savitzky–Golay smoothed column.

    Parameters
    ----------
    curve : ndarray, shape (T,) or (T, n)

    Returns
    -------
    ndarray, shape () or (n,): lower is smoother
    """
    a = np.asarray(curve, dtype=np.float64)
    flat = a.ndim == 1
    x = _normalise(a[:, None] if flat else a)
    if x.shape[0] > window:
        x = _savgol(x, window, order)
    s: npt.NDArray[np.float64] = np.square(np.diff(x, n=2, axis=0)).sum(axis=0)
    return s[0] if flat else s


def candidate_channels(
    hidden: npt.NDArray[np.floating[Any]], *, top: int = 10, skip_first: int = 64
) -> list[Candidate]:
    """The statistics' candidates: channels monotonic in more than L/4 layers, the ``top``
    smoothest (smallest :func:`smoothness` over their monotonic layers) first.

    Parameters
    ----------
    hidden : ndarray, shape (L, T, d)
        Residual stream after each layer, averaged over a corpus.
    top : int
    skip_first : int
        Positions left out of the fit and the smoothness.

    Returns
    -------
    list of Candidate (no losses yet), at most ``top``
    """
    if hidden.ndim != 3:
        raise ValueError(f"hidden must be (layers, positions, channels), got shape {hidden.shape}")
    L = hidden.shape[0]
    mono = monotonic_layers(hidden, skip_first=skip_first)
    keep = [c for c, layers in enumerate(mono) if len(layers) > L // 4]
    scored = []
    for c in keep:
        s = min(float(smoothness(hidden[layer, skip_first:, c])) for layer in mono[c])
        scored.append(Candidate(channel=c, monotonic_layers=list(mono[c]), smoothness=s))
    scored.sort(key=lambda k: (k.smoothness, k.channel))
    return scored[:top]


# ---- selection -------------------------------------------------------------------------------
class CalibratedModel(Protocol):
    """What :func:`calibrate` needs of a :class:`lamina.model.Model`."""

    config: LlamaConfig

    def tokenize(self, text: str) -> list[int]: ...

    def chat_prompt(self, message: str) -> str: ...

    def encode(self, text: str) -> list[int]: ...

    def hidden_states(self, ids: Sequence[int]) -> npt.NDArray[np.float32]: ...

    def logits(self, ids: Sequence[int]) -> npt.NDArray[np.float32]: ...

    def set_channel(self, scaling: ChannelScaling | None) -> None: ...

    def identity(self) -> dict[str, Any]: ...


def _answer_loss(model: CalibratedModel, prompt_ids: list[int], answer_ids: list[int]) -> float:
    ids = prompt_ids + answer_ids
    logits = model.logits(ids)[len(prompt_ids) - 1 : len(ids) - 1].astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    return float(np.mean(lse - logits[np.arange(len(answer_ids)), answer_ids]))


def calibrate(
    model: CalibratedModel,
    *,
    samples: int = 10,
    seed: int = 0,
    corpus_texts: int = 4,
    corpus_tokens: int = 1024,
    length: int = 512,
    top: int = 10,
    skip_first: int = 64,
    factors: Sequence[float] = FACTORS,
    layers: tuple[int, int] | None = None,
    progress: Callable[[int, str], None] | None = None,
) -> Calibration:
    """Find a model's channel and factor (the module's two steps) and return the calibration.

    Parameters
    ----------
    model : lamina.model.Model
        Without position scaling; its channel scaling is changed during the search and
        removed at the end.
    samples : int
        Key-value retrievals of the selection (gold positions 0 … 1 in turn).
    seed : int
        Seeds the corpus and the retrievals (:data:`CALIBRATION_SEED_BASE` keeps them apart
        from the evaluation's).
    corpus_texts, corpus_tokens : int
        Random-string texts whose hidden states are averaged, and their length in tokens.
    length : int
        Tokens per retrieval prompt.
    top : int
        Candidates kept by the statistics.
    skip_first : int
        Positions left out of the statistics.
    factors : sequence of float
        Factors tried per candidate.
    layers : (int, int), optional
        Scaled layers [first, last); default :func:`middle_layers`.
    progress : callable (steps done, note), optional
        Called after every forward.

    Returns
    -------
    Calibration

    Raises
    ------
    InvalidInput
        samples, corpus_texts or top below 1, or a statistics pass that keeps no channel.
    """
    if samples < 1 or corpus_texts < 1 or top < 1:
        raise InvalidInput("samples, corpus_texts and top must be >= 1")
    c = model.config
    first, last = layers if layers is not None else middle_layers(c.n_layers)
    tick = progress or (lambda _k, _s: None)
    model.set_channel(None)
    # 1. statistics on the random-string corpus
    mean: npt.NDArray[np.float64] | None = None
    for i, text in enumerate(random_string_corpus(corpus_texts, corpus_tokens * 4, seed=seed)):
        ids = model.tokenize(text)[:corpus_tokens]
        h = model.hidden_states(ids).astype(np.float64)
        mean = h if mean is None else mean[:, : h.shape[1]] + h[:, : mean.shape[1]]
        tick(1, f"corpus {i + 1}/{corpus_texts}")
    assert mean is not None
    cands = candidate_channels(mean / corpus_texts, top=top, skip_first=skip_first)
    if not cands:
        raise InvalidInput("no channel is monotonic in more than a quarter of the layers")
    # 2. selection by the answer's cross-entropy
    count = lambda text: len(model.tokenize(model.chat_prompt(text)))  # noqa: E731
    data = []
    for ex in calibration_set(samples, count=count, length=length, seed=seed):
        p = model.tokenize(model.chat_prompt(ex.prompt)) + model.encode(ex.answer_prefix)
        data.append((p, model.encode(ex.answer)))

    def loss(scaling: Callable[[int], ChannelScaling] | None, note: str) -> float:
        out = []
        for p, a in data:
            model.set_channel(None if scaling is None else scaling(len(a) + 1))
            out.append(_answer_loss(model, p, a))
            tick(1, note)
        return float(np.mean(out))

    def at(ch: int, f: float, n: int | None = None) -> Callable[[int], ChannelScaling]:
        return lambda k: ChannelScaling(ch, f, first, last, k if n is None else n)

    try:
        base = loss(None, "baseline")
        scored: list[Candidate] = []
        best: tuple[float, int, float] = (np.inf, -1, 1.0)
        for cand in cands:
            losses = {}
            for f in factors:
                v = loss(at(cand.channel, float(f)), f"channel {cand.channel} x {f:g}")
                losses[str(float(f))] = v
                if v < best[0]:
                    best = (v, cand.channel, float(f))
            scored.append(Candidate(cand.channel, cand.monotonic_layers, cand.smoothness, losses))
        all_pos = loss(at(best[1], best[2], 0), f"channel {best[1]} x {best[2]:g}, all positions")
    finally:
        model.set_channel(None)
    scaling = ChannelScaling(best[1], best[2], first, last, 0 if all_pos < best[0] else 1)
    return Calibration(
        model=model.identity(),
        scaling=scaling,
        baseline_loss=base,
        loss=best[0],
        all_positions_loss=all_pos,
        candidates=scored,
        settings={
            "samples": samples,
            "seed": seed,
            "corpus_texts": corpus_texts,
            "corpus_tokens": corpus_tokens,
            "length": length,
            "top": top,
            "skip_first": skip_first,
            "factors": [float(f) for f in factors],
            "selection": "mean answer cross-entropy, prompt's last token and the answer scaled",
        },
    )


def total_steps(*, samples: int, corpus_texts: int, top: int, factors: int = len(FACTORS)) -> int:
    """Forwards :func:`calibrate` runs at most (for a progress bar)."""
    return corpus_texts + samples * (1 + top * factors + 1)
