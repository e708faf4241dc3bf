"""Memory(device="cuda"): the vector index in device memory (marked gpu: runs where a CUDA build
and a device exist, else skips; a CUDA build that fails to load fails, see tests/conftest.py)."""

from __future__ import annotations

import pytest

from lamina import Memory, MemoryConfig
from memkit import FILLER, T0, chat

QUESTIONS = ("Which cats did Bob adopt?", "Where is the bakery?", "football")


def _build(mem: Memory) -> None:
    for s in range(6):
        chat(mem, "u", f"s{s}", FILLER + [("Bob", f"I adopted cat number {s} in town {s}.")], T0 + s * 86_400, f"{s}")
        mem.end_session(user_id="u", session_id=f"s{s}")
    mem.delete(mem.context("cat number 2", user_id="u", budget=8).items[0].id, user_id="u")


def _items(mem: Memory) -> list[list[int]]:
    return [[it.id for it in mem.context(q, user_id="u", budget=96).items] for q in QUESTIONS]


@pytest.mark.gpu
@pytest.mark.parametrize("config", [MemoryConfig(), MemoryConfig(codec="binary"), MemoryConfig(vector_dtype="float16")])
def test_device_memory_serves_the_cpu_memory_items_and_reopens(tmp_path, config) -> None:  # type: ignore[no-untyped-def]
    cpu = Memory(tmp_path / "cpu.db", embedder="hashing", config=config)
    gpu = Memory(tmp_path / "gpu.db", embedder="hashing", config=config, device="cuda")
    _build(cpu)
    _build(gpu)
    want = _items(cpu)
    assert _items(gpu) == want
    gpu.close()
    with Memory(tmp_path / "gpu.db", embedder="hashing", config=config, device="cuda") as again:
        assert _items(again) == want  # the device arenas rebuilt from the store
    cpu.close()
