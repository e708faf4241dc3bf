"""``lamina.native``: the typed wrappers over the compiled core (``lamina._core``), one module per
C++ concept: build and runtime facts (:mod:`._info`), the device dispatch (:mod:`._device`), the
vector arena and exact top-k (:mod:`.search`), the fused memory-loop kernels (:mod:`.kernels`),
the lexical index (:mod:`.lexical`), the fleet step (:mod:`.fleet`) and the per-(user, layer)
vector index (:mod:`.layer_index`).

These modules import nothing of lamina but the core, :mod:`lamina.errors` and :mod:`lamina.text`
(the stemmer of the lexical index)."""
