"""``lamina.memory.dump``: export and import — the JSONL export format (:mod:`.format`, reference:
``docs/reference/export-format.md``; read and checked by :mod:`.reader`), its typed entries
(:mod:`.entries`) and the notes' entries (:mod:`.note_entries`), one user's export and import
through the store (:mod:`.user_transfer`, with the façade's ``export_user`` / ``import_user``),
and whole memories to and from JSONL files (:mod:`.jsonl`: ``lamina export`` / ``lamina
import``).

:mod:`.jsonl` is the one module here above the façade (it opens and fills a
:class:`lamina.Memory`); this ``__init__`` imports none of them."""
