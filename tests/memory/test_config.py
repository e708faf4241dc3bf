"""lamina.memory.config: MemoryConfig validation (TypeError for wrong types, InvalidInput for values)."""

from __future__ import annotations

import pytest

from lamina import InvalidInput, Memory, MemoryConfig
from memkit import FILLER, T0, chat


def test_defaults_are_valid_and_frozen() -> None:
    c = MemoryConfig()
    assert c.working_capacity == 16 and c.layers == ("working", "episodic", "semantic") and c.eviction == "coverage"
    with pytest.raises(AttributeError):
        c.alpha = 0.5  # type: ignore[misc]


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"alpha": 1.5}, "alpha"),
        ({"working_capacity": 0}, "working_capacity"),
        ({"working_capacity": 1}, "working_capacity"),
        ({"min_segment_turns": 4, "max_segment_turns": 3}, "min_segment_turns"),
        ({"beta": -1.0}, "beta"),
        ({"heat_mu": 0.0}, "heat_mu"),
        ({"max_entropy": 0.0}, "max_entropy"),
        ({"min_similarity": float("nan")}, "finite"),
        ({"layers": ("episodic",)}, "layers"),
        ({"layers": ["working"]}, "layers"),
        ({"synchronous": "OFF"}, "synchronous"),
        ({"ann_threshold": 0}, "ann_threshold"),
        ({"ann_m": 1}, "ann_m"),
        ({"eviction": "lru"}, "eviction"),
        ({"eviction_tiebreak": -1.0}, "eviction_tiebreak"),
        ({"speaker_scope": 2.0}, "speaker_scope"),
        ({"codec": "pq"}, "codec"),
        ({"oversample": -1}, "oversample"),
        ({"vector_dtype": "int8"}, "vector_dtype"),
    ],
)
def test_bad_values(kw: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidInput, match=match) as exc:
        MemoryConfig(**kw)
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"ann_ef_search": 1.5}, "ann_ef_search"),
        ({"working_capacity": True}, "working_capacity"),
        ({"alpha": "0.5"}, "alpha"),
        ({"eviction_tiebreak": "0"}, "eviction_tiebreak"),
        ({"lexical": 1}, "lexical"),
        ({"oversample": True}, "oversample"),
        ({"oversample": 2.0}, "oversample"),
    ],
)
def test_bad_types(kw: dict, match: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(TypeError, match=match):
        MemoryConfig(**kw)


def test_max_entropy_may_be_none_and_synchronous_any_case() -> None:
    assert MemoryConfig(max_entropy=None).max_entropy is None
    assert MemoryConfig(synchronous="full").synchronous == "full"  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["binary", "int8"])
def test_a_codec_with_every_row_a_candidate_gives_the_same_contexts(codec: str) -> None:
    contexts = []
    for cfg in (MemoryConfig(), MemoryConfig(codec=codec, oversample=10_000)):  # type: ignore[arg-type]
        mem = Memory(None, embedder="hashing", config=cfg)
        for s in range(4):
            chat(
                mem,
                "u",
                f"s{s}",
                FILLER + [("Alice", f"My sister number {s} moved to Lisbon.")],
                T0 + s * 86_400,
                f"{s}",
            )
            mem.end_session(user_id="u", session_id=f"s{s}")
        contexts.append(
            [mem.context(q, user_id="u", budget=64).render() for q in ("Where did my sister move?", "bakery")]
        )
        mem.close()
    assert contexts[0] == contexts[1]


def test_float16_vectors_give_the_same_items_on_a_small_memory(tmp_path) -> None:  # type: ignore[no-untyped-def]
    got = []
    for dtype in ("float32", "float16"):
        mem = Memory(tmp_path / f"{dtype}.db", embedder="hashing", config=MemoryConfig(vector_dtype=dtype))  # type: ignore[arg-type]
        for s in range(3):
            chat(mem, "u", f"s{s}", FILLER + [("Bob", f"I adopted cat number {s}.")], T0 + s * 86_400, f"{s}")
            mem.end_session(user_id="u", session_id=f"s{s}")
        # (ids carry a per-database prefix: the items are compared by what they are)
        got.append(
            [(it.kind, it.text) for it in mem.context("Which cats did Bob adopt?", user_id="u", budget=64).items]
        )
        mem.close()
    assert got[0], "the context must hold something to compare"
    assert got[0] == got[1]


def test_device_is_checked_and_a_failed_open_leaves_nothing_open(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import lamina

    with pytest.raises(ValueError, match="device"):
        Memory(tmp_path / "a.db", embedder="hashing", device="tpu")
    with pytest.raises(TypeError, match="device"):
        Memory(tmp_path / "a.db", embedder="hashing", device=0)  # type: ignore[arg-type]
    if lamina.cuda_device_count() == 0:
        with pytest.raises(RuntimeError, match="CUDA|cuda"):
            Memory(tmp_path / "b.db", embedder="hashing", device="cuda")
    with Memory(tmp_path / "b.db", embedder="hashing") as mem:  # the file is usable afterwards
        mem.add([{"speaker": "a", "text": "hello there"}], user_id="u", session_id="s")


class _Words:
    """The hashing embedder under another name, not saying that its vectors are word features."""

    def __init__(self) -> None:
        from lamina.embedders import Hashing

        self._h = Hashing()
        self.dim = self._h.dim
        self.name = "words-under-another-name"

    def embed(self, texts: list[str]):  # type: ignore[no-untyped-def]
        return self._h.embed(texts)


def test_lexical_weight_is_set_by_the_embedder_unless_given() -> None:
    """lexical_weight None (the default) becomes 2 for an embedder whose vectors are word
    features (hashing), 1 for any other; an explicit weight is kept either way."""
    from lamina.embedders import Hashing, is_lexical

    assert MemoryConfig().lexical_weight is None
    assert is_lexical(Hashing()) and not is_lexical(_Words())
    with Memory(None, embedder="hashing") as m:
        assert m.config.lexical_weight == 2.0
    with Memory(None, embedder=_Words()) as m:
        assert m.config.lexical_weight == 1.0
    for w in (0.0, 1.0, 3.5):
        with Memory(None, embedder="hashing", config=MemoryConfig(lexical_weight=w)) as m:
            assert m.config.lexical_weight == w
    assert MemoryConfig(lexical_weight=1.5).for_embedder(lexical=True).lexical_weight == 1.5
    with pytest.raises(InvalidInput, match="lexical_weight"):
        MemoryConfig(lexical_weight=-1.0)
    with pytest.raises(TypeError, match="lexical_weight"):
        MemoryConfig(lexical_weight="2")  # type: ignore[arg-type]
