"""``lamina.memory.store``: persistence, the only SQL of the memory loop — the
:class:`~lamina.memory.store.protocol.Store` protocol with the item rows' columns and codec
(:mod:`.protocol`), the SQL both backends share (:mod:`.sql`), its SQLite backend (:mod:`.sqlite`), PostgreSQL (:mod:`.postgres`, its schema
and migrations in :mod:`.pgschema`) with pgvector (:mod:`.pgvectors`) and ``LISTEN`` / ``NOTIFY``
(:mod:`.pgnotify`), the A-Mem notes' rows (:mod:`.notestore`) and database URLs (:mod:`.dburl`).

The bottom of the memory package: these modules import nothing of lamina.memory outside this
folder."""
