"""``lamina.memory.read``: the read path, in the order it runs — per-layer candidates
(:mod:`.candidates`), the episodic turns' rank fusion (:mod:`.fusion`), the ranking
(:mod:`.ranking`), the safeguards of the contextual firewall (:mod:`.firewall`) and the budget
fill (:mod:`.fill`); the batch pipeline over those steps (:mod:`.batch`) and the façade's
``context`` / ``search`` mixin (:mod:`.reading`), ``explain_context`` (:mod:`.explain`); and the
read-only views: listings (:mod:`.listing`), statistics (:mod:`.stats`) and the
:class:`~lamina.memory.read.inspection.Inspection` mixin.

These modules build on :mod:`lamina.memory.state` and :mod:`lamina.memory.store`, never on the
write path or the façade."""
