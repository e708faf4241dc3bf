"""LAVa: layer-wise KV eviction with dynamic head and layer budgets.

Shen, Yuan, Zhang, Wang, Jiang, Nguyen, "LAVa: Layer-wise KV Cache Eviction with Dynamic
Budget Allocation", arXiv 2509.09754 (EMNLP 2025); reference code MGDDestiny/Lava
(``LavaKVCluster`` in ``adaptive_snapkv/monkeypatch/snapkv_utils.py``).

Formula implemented. With w the window, n = S - w, b' = budget - w, alpha = ``floor_alpha``:

1. Scores (per query head h, position j < n)::

       s[h, j] = maxpool_k( mean_t A[h, t, j] )[j] * nu[g(h)],
       nu[g]   = max_{j < n} ||v_{g, j}||_1            (largest value L1 norm of the KV head)

   then GQA: ``s_kv[g, j] = max_{h in group g} s[h, j]``. Input (L, H, S) is read as the
   window mean. ``value_norms`` is either the per-token L1 norms (L, H_kv, S) (see
   :func:`lamina.kv.value_norms`), of which the max over j < n is taken, or nu itself (L, H_kv).
2. Layer entropy: ``p = s_kv[l] / sum(s_kv[l])`` over its N = H_kv * n entries,
   ``E_l = -sum p log p / log N`` (normalised, in [0, 1]).
3. Layer budgets: ``b'_l`` proportional to ``E_l`` with ``sum_l b'_l = L * b'``.
4. Head budgets in layer l: ``n_g`` = entries of head g among the top ``H_kv * b'_l`` of the
   layer (global top-k, ties: smaller (head, position)); ``b_g = (1 - alpha) n_g + alpha b'_l``.
5. Each KV head keeps its top ``b_g`` positions by ``s_kv`` plus the window ``[S - w, S)``.

Choices where the reference is ambiguous or buggy (each documented):

* Floor constant. The reference assigns the misspelt attribute ``floor_capactiy``, so the
  floor it actually adds is the constant ``int(alpha * B)`` of the configured *total* budget
  B (window included), the same in every layer, and ``sum_g b_g`` exceeds ``H_kv * b'_l``.
  lamina uses the intended floor ``alpha * b'_l`` (the paper's mixing of per-head counts with
  a uniform share), so budgets are exact.
* Rounding. The reference truncates layer budgets with ``int`` (losing up to L - 1 tokens)
  and rounds head budgets with ``round`` (which can miss the total). lamina rounds both by
  largest remainder (ties: lower layer / head index), so the model keeps exactly
  ``L * H_kv * budget`` tokens and layer l exactly ``H_kv * (b'_l + w)``.
* Caps. A layer budget larger than n is clamped to n and its excess re-split over the other
  layers in proportion to entropy (the reference keeps such a layer whole and loses the excess).
  Head budgets never exceed n (a convex mix of counts <= n).
* Entropy details. The reference adds 1e-16 inside the log and to the normaliser; lamina uses
  ``0 log 0 = 0`` exactly (a difference below 1e-15) and vectorised float32 logarithms, so
  E_l is accurate to about 1e-6. A layer whose scores are all 0, or with N = 1, has E_l = 0;
  if every layer has E_l = 0 the split is uniform. The entropies used are returned in
  ``KeepSet.info["entropy"]``.
* Order of work. The reference runs layer by layer and shrinks earlier layers as later
  entropies arrive; its end state is the formula over all layers, which lamina computes
  directly (all scores first). Prefill only, as in the reference.
* Not implemented: the reference's ``skip`` (uniform budgets for the first layers) and
  ``normalize`` (per-head rescaling) options, both off in its published configs.

Defaults are the reference's LongBench settings: w = 32, kernel 7, max pooling, alpha = 0.2,
GQA max.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import numpy.typing as npt

from .. import _core
from ..native import _device
from . import _ops
from .method import Selection, apportion, check_fraction, device_f32_shape, select_rows
from .snapkv import SnapKV

__all__ = ["LAVa"]


@dataclass
class LAVa(SnapKV):
    """Value-norm-weighted window scores; entropy layer budgets; mixed head budgets.

    Parameters
    ----------
    floor_alpha : float in [0, 1]
        alpha: weight of the uniform share in each head's budget (default 0.2). 0 gives pure
        global top-k head budgets (Ada-KV without a floor), 1 uniform heads.
    window_size : int, optional
        w (default 32 for (L, H, S) input; the row count for window attention).
    kernel_size : int
        Default 7.
    pooling : {"max", "avg", "none"}
        Default "max".
    gqa : {"max", "mean"}
        Default "max" (the reference).

    ``select`` requires ``value_norms``: float32, shape (L, H_kv, S) per-token L1 norms of
    the values, or (L, H_kv) per-head norms nu; finite, >= 0.
    """

    name: ClassVar[str] = "lava"
    default_window: ClassVar[int] = 32
    uses_value_norms: ClassVar[bool] = True
    kernel_size: int = 7
    pooling: Literal["avg", "max", "none"] = "max"
    gqa: Literal["mean", "max"] = "max"
    floor_alpha: float = 0.2

    def validate(self) -> None:
        super().validate()
        check_fraction(self.floor_alpha, "floor_alpha")

    def _scale_args(
        self,
        value_norms: npt.NDArray[np.float32] | None,
        scores: npt.NDArray[np.float32],
        n_kv_heads: int,
    ) -> tuple[Any, Any]:
        L, S = scores.shape[0], scores.shape[-1]
        if value_norms is None:
            raise ValueError(
                "lava needs value_norms: the L1 norms of the values, shape (L, H_kv, S) "
                "(lamina.kv.value_norms(values)) or per-head maxima (L, H_kv)"
            )
        if _device.is_device_array(value_norms):
            vshape = device_f32_shape(value_norms, "value_norms")
            if vshape == (L, n_kv_heads, S):
                return None, value_norms
            if vshape == (L, n_kv_heads):
                return value_norms, None
            raise ValueError(
                f"value_norms must have shape (L, H_kv, S) = {(L, n_kv_heads, S)} or (L, H_kv) = "
                f"{(L, n_kv_heads)}, got {vshape}"
            )
        if not isinstance(value_norms, np.ndarray):
            raise TypeError(f"value_norms must be a numpy.ndarray of dtype float32, got {type(value_norms).__name__}")
        if value_norms.dtype != np.float32:
            raise TypeError(
                f"value_norms must have dtype float32, got {value_norms.dtype}; convert "
                "explicitly with value_norms.astype(numpy.float32)"
            )
        if value_norms.shape == (L, n_kv_heads, S):
            return None, value_norms
        if value_norms.shape == (L, n_kv_heads):
            return value_norms, None
        raise ValueError(
            f"value_norms must have shape (L, H_kv, S) = {(L, n_kv_heads, S)} or (L, H_kv) = "
            f"{(L, n_kv_heads)}, got {value_norms.shape}"
        )

    scores_decide_budgets: ClassVar[bool] = True

    def _budget_and_select(
        self, sel: Selection, w: int, per_head: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], dict[str, Any]]:
        x, n_kv_heads, value_norms, threads = sel.scores, sel.n_kv_heads, sel.value_norms, sel.threads
        per_row, per_token = self._scale_args(value_norms, x, n_kv_heads)
        if not _ops.on_device(("scores", x), ("value_norms", value_norms)):
            # host: scores, entropies, layer budgets (base.apportion's rule), head counts,
            # head budgets and row selections in one native call (lamina::kv::lava_select)
            idx, off, counts, k, entropy, layer_b = _core.kv_lava_select(
                x,
                n_kv_heads,
                x.shape[-1] - w,
                self.pooling,
                int(self.kernel_size),
                self.gqa,
                per_row,
                per_token,
                per_head,
                float(self.floor_alpha),
                w,
                threads,
            )
        else:  # CUDA arrays: the same steps through the device kernels
            rows, entropy = self._score(x, w, n_kv_heads, value_norms, threads, entropy=True)
            L, hkv, n = rows.shape
            alpha = float(self.floor_alpha)
            layer_b = apportion(entropy, L * per_head, n)
            counts = _ops.layer_head_counts(rows, hkv * layer_b, None, threads)
            mixed = (1.0 - alpha) * counts + alpha * layer_b[:, None].astype(np.float64)
            k = np.empty((L, hkv), dtype=np.int64)
            for layer in range(L):
                k[layer] = apportion(mixed[layer], hkv * int(layer_b[layer]), n)
            idx, off = select_rows(rows, k, n, w, threads)
        info = {
            "entropy": entropy,
            "layer_budgets": layer_b,
            "head_counts": counts,
            "head_budgets": k.copy(),
        }
        return idx, off, k, info
