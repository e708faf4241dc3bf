"""The read path of :class:`lamina.Memory`: ``context``, ``explain_context``, ``search`` and
their batches (the :class:`Reading` mixin). Every call is a batch: it checks its inputs, embeds
its queries in one call, then, under the memory's lock and caught up with other writers, hands
the users' state to :mod:`lamina.memory.read.batch`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..config import ACTIVE_LAYERS
from ..inputs import MAX_K, TimeLike, check_count, check_layers, query_matrix, query_vector, to_time
from ..metadata import Filter, parse_filters
from ..reports import ContextExplanation
from ..state.host import MemoryHost
from ..state.memstate import UserState
from ..types import Context, MemoryItem
from . import batch
from .firewall import Firewall

__all__ = ["Reading"]


class Reading:
    """The read path of a memory (mixed into :class:`lamina.Memory`)."""

    def context(
        self: MemoryHost,
        query: str,
        *,
        user_id: str,
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embedding: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> Context:
        """Build a budgeted context for ``query`` from ``user_id``'s memory.

        Per active layer (working, episodic, semantic; the archive too with
        ``include_archive=True``): top-m candidates by cosine; layer relevance r_i = mean of the
        top ``relevance_top`` similarities; γ = softmax_gate(β·r) with the entropy bound ε;
        the budget is split ∝ γ (working first, at most ``working_share``), filled by score, then
        the rest by global score; duplicates (sources already covered) are dropped; items under
        ``min_similarity`` never enter (nothing left → ``abstain``); the result is ordered against
        lost-in-the-middle. Returned items get ``access_count`` += 1 and ``last_access`` = now.

        Parameters
        ----------
        query : str
        user_id : str
            A user something was added for; an unknown one raises
            :class:`~lamina.errors.NotFoundError` (a misspelt id is not an empty memory).
        budget : int
            Token budget (whitespace words of the rendered context), 1 ..
            :data:`~lamina.memory.inputs.MAX_BUDGET` (10,000,000).
        now : event time of the question (default: wall clock). When given, items stated after
            ``now`` are invisible (replays behave as if it were then).
        domain : str, optional
            Domain gate: items tagged with another domain are blocked. ``"auto"``: the query's
            domain from the memory's :class:`~lamina.DomainClassifier` (the default lexicon
            unless ``Memory(domains=...)``).
        query_embedding : ndarray, shape (dim,), float32, optional
            Precomputed query vector (skips embedding).
        firewall : lamina.Firewall, optional
            The contextual firewall between retrieval and the prompt (domain gate, similarity
            floor τ, CLARIFY commitments); its decisions are in ``Context.firewall``. With a
            firewall, ``domain=None`` means ``"auto"``, and the gate is the firewall's.
        filters : dict, optional
            Only items it admits enter (:mod:`lamina.memory.metadata`: equality, ``in``,
            ``gte``/``lte`` on numbers and ``created_at``, ``and``/``or``), pushed into the
            candidate searches, so the budget fills from matching items alone (a derived item
            carries what its source turns agree on: ``MemoryItem.metadata``). A metadata key no
            item of the user carries raises InvalidInput.
        """
        ctx, _ = _one_context(
            self,
            query,
            user_id,
            budget,
            now,
            domain,
            include_archive,
            query_embedding,
            firewall,
            filters,
            explain=False,
        )
        return ctx

    def explain_context(
        self: MemoryHost,
        query: str,
        *,
        user_id: str,
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embedding: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> ContextExplanation:
        """What :meth:`context` would return for the same arguments, and why: each layer's
        candidates with their scores, whether each was chosen and, if not, why (budget,
        duplicate, taken by another layer, ranked down by the firewall), the layer relevances,
        the gates with their entropy and its bound. Read-only: unlike :meth:`context` it counts
        no visit (the access statistics, hence later contexts, are unchanged).

        Parameters
        ----------
        As :meth:`context`.

        Returns
        -------
        ContextExplanation
            ``.context`` equals ``context(...)``'s result (items, scores, gates, β).
        """
        ctx, ex = _one_context(
            self, query, user_id, budget, now, domain, include_archive, query_embedding, firewall, filters, explain=True
        )
        if ex is None:
            ex = ContextExplanation(context=ctx, max_entropy=self.config.max_entropy)
        return ex

    def context_batch(
        self: MemoryHost,
        queries: Sequence[str],
        *,
        user_ids: str | Sequence[str],
        budget: int = 1024,
        now: TimeLike = None,
        domain: str | None = None,
        include_archive: bool = False,
        query_embeddings: npt.NDArray[np.float32] | None = None,
        firewall: Firewall | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[Context]:
        """:meth:`context` of many queries in one call: the same contexts (items, order, scores,
        render, visits counted) as ``[context(q, user_id=u, ...) for q, u in zip(queries,
        user_ids)]``, for one embedding call, one lock and batched native searches
        (:mod:`lamina.memory.read.batch`).

        Visits: as in that loop, each context counts a visit of its items before the next is
        built, so an item shown by several contexts shows in each the ``access_count`` and
        ``last_access`` the loop would show (the visits change nothing else a context reads).
        The batch is one operation: no write of another thread comes between its contexts.

        Parameters
        ----------
        queries : sequence of str
            Empty: returns [].
        user_ids : str or sequence of str
            One user for every query, or one per query (``len(user_ids) == len(queries)``).
        query_embeddings : ndarray, shape (len(queries), dim), float32, optional
            Precomputed query vectors. Without them the queries are embedded in one call; an
            embedder whose vector of a text depends on the texts embedded with it (a padded
            transformer batch may round differently) can then differ from the loop in the
            last bits of the scores.
        budget, now, domain, include_archive, firewall, filters
            As :meth:`context`, for every query.

        Returns
        -------
        list of Context, one per query, in order.

        Raises
        ------
        TypeError, InvalidInput
            As :meth:`context`, naming the bad entry (``queries[3]``); mismatched lengths of
            ``user_ids`` and ``queries``. Nothing is read or counted then.
        """
        self._check_open()
        qs, uids = batch.pairs(queries, user_ids)
        budget, t_now, domain = batch.options(budget, now, domain, firewall)
        domains = batch.query_domains(self._query_domains, qs, domain, firewall)
        flt = parse_filters(filters)
        Q = query_matrix(self._embed, self._dim, qs, query_embeddings)
        if not qs:
            return []
        found = _contexts(self, qs, uids, Q, domains, budget, t_now, include_archive, firewall, False, flt)
        return [c for c, _ in found]

    def search(
        self: MemoryHost,
        query: str,
        *,
        user_id: str,
        k: int = 10,
        layers: Sequence[str] | None = None,
        now: TimeLike = None,
        query_embedding: npt.NDArray[np.float32] | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[MemoryItem]:
        """Top-k items of ``user_id`` by cosine similarity (no budget, gate or floor; no access bump).

        Parameters
        ----------
        k : int
            How many items, 1 .. :data:`~lamina.memory.inputs.MAX_K` (100,000).
        layers : list of str, optional
            Any of ``working``, ``episodic``, ``semantic``, ``archive`` (every raw turn ever added,
            including those still in working memory), ``history`` (superseded facts). Default:
            the active layers.
        filters : dict, optional
            As :meth:`context`'s: the top-k among the admitted items, ``min(k, matching)`` of
            them (the filter is pushed into the search, never applied after it).
        """
        self._check_user_call(user_id)
        k = check_count(k, "k", maximum=MAX_K)
        names, archive_only = _search_layers(layers)
        t_now = to_time(now, "now")
        flt = parse_filters(filters)
        q = query_vector(self._embed, self._dim, query, query_embedding)
        with self._op():
            return batch.searches(self._st, _caught_up(self, [user_id]), q, names, k, t_now, archive_only, flt)[0]

    def search_batch(
        self: MemoryHost,
        queries: Sequence[str],
        *,
        user_ids: str | Sequence[str],
        k: int = 10,
        layers: Sequence[str] | None = None,
        now: TimeLike = None,
        query_embeddings: npt.NDArray[np.float32] | None = None,
        filters: Mapping[str, Any] | None = None,
    ) -> list[list[MemoryItem]]:
        """:meth:`search` of many queries in one call (one embedding call, batched native
        searches): the same items, order and scores as a loop of :meth:`search`. ``user_ids``:
        one user for every query, or one per query; ``query_embeddings``: shape
        (len(queries), dim), float32 (see :meth:`context_batch`). Empty ``queries``: []."""
        self._check_open()
        qs, uids = batch.pairs(queries, user_ids)
        k = check_count(k, "k", maximum=MAX_K)
        names, archive_only = _search_layers(layers)
        t_now = to_time(now, "now")
        flt = parse_filters(filters)
        Q = query_matrix(self._embed, self._dim, qs, query_embeddings)
        if not qs:
            return []
        with self._op():
            return batch.searches(self._st, _caught_up(self, uids), Q, names, k, t_now, archive_only, flt)


def _search_layers(layers: Sequence[str] | None) -> tuple[list[str], bool]:
    """The layers a search reads (the archive with working memory: every raw turn, live ones
    included), and whether only the archive was asked for."""
    names = list(ACTIVE_LAYERS) if layers is None else check_layers(layers)
    archive_only = layers is not None and "archive" in layers and "working" not in layers
    if "archive" in names and "working" not in names:
        names.append("working")
    return list(dict.fromkeys(names)), archive_only


def _one_context(
    host: MemoryHost,
    query: str,
    user_id: str,
    budget: int,
    now: TimeLike,
    domain: str | None,
    include_archive: bool,
    query_embedding: npt.NDArray[np.float32] | None,
    firewall: Firewall | None,
    filters: Mapping[str, Any] | None,
    *,
    explain: bool,
) -> tuple[Context, ContextExplanation | None]:
    host._check_user_call(user_id)
    budget, t_now, domain = batch.options(budget, now, domain, firewall)
    domains = batch.query_domains(host._query_domains, [query], domain, firewall)
    flt = parse_filters(filters)
    q = query_vector(host._embed, host._dim, query, query_embedding)
    return _contexts(host, [query], [user_id], q, domains, budget, t_now, include_archive, firewall, explain, flt)[0]


def _contexts(
    host: MemoryHost,
    queries: list[str],
    user_ids: list[str],
    Q: npt.NDArray[np.float32],
    domains: list[str | None],
    budget: int,
    t_now: float | None,
    include_archive: bool,
    firewall: Firewall | None,
    explain: bool,
    flt: Filter | None = None,
) -> list[tuple[Context, ContextExplanation | None]]:
    with host._op():
        return batch.contexts(
            host._st,
            _caught_up(host, user_ids),
            queries,
            Q,
            domains,
            budget=budget,
            t_now=t_now,
            include_archive=include_archive,
            firewall=firewall,
            explain=explain,
            classifier=host._query_domains,
            filters=flt,
        )


def _caught_up(host: MemoryHost, user_ids: list[str]) -> list[UserState]:
    """Under the lock: the memory open and caught up with other writers, each query's user.

    Raises
    ------
    NotFoundError
        A user nothing was ever added for (or whose memories were all deleted): a misspelt id
        would otherwise read as an empty memory.
    """
    host._check_open()
    host._sync()
    users = {uid: host._known_user(uid) for uid in dict.fromkeys(user_ids)}
    return [users[uid] for uid in user_ids]
