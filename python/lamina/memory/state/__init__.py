"""``lamina.memory.state``: what the memory holds in process and how it follows the store — item
records and namespace codes (:mod:`.records`), posting lists (:mod:`.postings`), per-user
indexes (:mod:`.userstate`), the state itself and its catching up with the store
(:mod:`.memstate`, over :mod:`.placement`: the α decay, lookups and vector placement), what the
façade's mixins read of it (:mod:`.host`), staleness (:mod:`.staleness`), the coverage rule's
neighbour lists (:mod:`.coverage`), turn vectors (:mod:`.turnvec`), the garbage collector's
pause (:mod:`.gcquiet`) and the unit of work (:mod:`.tx`).

Below the write and read paths and the façade: these modules import :mod:`lamina.memory.store`
and the memory's base modules (config, inputs, reports, types), never write/, read/, dump/ or
the façade."""
