"""``lamina.memory.write``: the write path — ``add`` (:mod:`.ingest`), consolidation at overflow
and at the end of a session (:mod:`.consolidate`), facts and profiles (:mod:`.semantic`), A-Mem
notes (:mod:`.notes`) and retention: heat, promotion and the capacity projection
(:mod:`.retention`).

These modules build on :mod:`lamina.memory.state` and :mod:`lamina.memory.store`, never on the
read path or the façade."""
