"""``lamina.memory.store``: persistence, the only SQL of the memory loop — the
:class:`~lamina.memory.store.protocol.Store` protocol and its SQLite backend (:mod:`.sqlite`),
PostgreSQL (:mod:`.postgres`) with pgvector (:mod:`.pgvectors`) and ``LISTEN`` / ``NOTIFY``
(:mod:`.pgnotify`), the A-Mem notes' rows (:mod:`.notestore`) and database URLs (:mod:`.dburl`).

The bottom of the memory package: these modules import nothing of lamina.memory outside this
folder."""
