"""Every fenced ``python`` block of README.md and docs/**/*.md runs here, so no example rots.

How a page's blocks run: in order, in one namespace and one temporary working directory per
page (a guide's later blocks use what its earlier ones made), one test per block. A block's
test continues the page's namespace when the test of the block before it ran in this session,
and otherwise runs the page's earlier blocks first, so ``-k`` and ``-x`` still work. A block
that needs what a test run cannot give it (a running server, a GPU, a file of the reader's) is
preceded by one line::

    <!-- example: skip REASON -->

and is reported as skipped with that reason; the page's other blocks run without it. Blocks
that load the local model or MPNet are marked ``slow`` (the fast lane leaves them out).
``lamina.Memory`` objects a page leaves open are closed when the module ends.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import lamina

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<info>[^`\n]*)$")
_SKIP = re.compile(r"^\s*<!--\s*example:\s*skip\s+(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One fenced ``python`` block: where it is, its code, and why it is skipped (None: it runs)."""

    page: str
    line: int
    code: str
    skip: str | None


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def read_blocks(path: Path, *, root: Path = ROOT) -> list[Block]:
    """The ``python`` blocks of one Markdown file, in order (indented fences included); pages are
    named relative to ``root``."""
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, info = m["indent"], m["info"].strip()
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        if info.split(" ")[0] == "python":
            body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]]
            prev = next((ln for ln in reversed(lines[:i]) if ln.strip()), "")
            skip = _SKIP.match(prev)
            blocks.append(
                Block(
                    page=str(path.relative_to(root)),
                    line=i + 1,
                    code="\n".join(body) + "\n",
                    skip=skip["reason"] if skip else None,
                )
            )
        i = j + 1
    return blocks


def _all_blocks() -> Iterator[tuple[Block, list[Block]]]:
    for path in _pages():
        blocks = read_blocks(path)
        for k, block in enumerate(blocks):
            yield block, [b for b in blocks[:k] if b.skip is None]


_SLOW = ("lamina.model", "MPNet", "LocalChat")  # blocks that load a model of seconds


def _case(block: Block, before: list[Block]) -> object:
    slow = any(s in b.code for b in [*before, block] for s in _SLOW)
    return pytest.param(block, before, id=f"{block.page}:{block.line}", marks=[pytest.mark.slow] if slow else [])


_CASES = [_case(block, before) for block, before in _all_blocks()]


def _close_memories(ns: dict[str, object]) -> None:
    for value in ns.values():
        if isinstance(value, lamina.Memory):
            value.close()


@dataclass
class _PageRun:
    """What a page's blocks have made so far: the lines of the blocks run, their namespace, their folder."""

    lines: list[int]
    ns: dict[str, object]
    folder: Path


@pytest.fixture(scope="module")
def page_runs() -> Iterator[dict[str, _PageRun]]:
    runs: dict[str, _PageRun] = {}
    yield runs
    for run in runs.values():
        _close_memories(run.ns)


@pytest.mark.parametrize(("block", "before"), _CASES)
def test_example_runs(
    block: Block,
    before: list[Block],
    page_runs: dict[str, _PageRun],
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if block.skip is not None:
        pytest.skip(block.skip)
    run = page_runs.pop(block.page, None)
    if run is None or run.lines != [b.line for b in before]:
        if run is not None:
            _close_memories(run.ns)
        run = _PageRun(lines=[], ns={"__name__": "__docs_example__"}, folder=tmp_path_factory.mktemp("example"))
        todo = [*before, block]
    else:
        todo = [block]
    monkeypatch.chdir(run.folder)
    for b in todo:
        try:
            exec(compile(b.code, f"{b.page}:{b.line}", "exec"), run.ns)
        except BaseException as exc:
            _close_memories(run.ns)
            raise AssertionError(f"the example at {b.page}:{b.line} failed: {exc!r}") from exc
        run.lines.append(b.line)
    page_runs[block.page] = run


def test_the_collector_finds_the_readme_quickstart() -> None:
    """The README's quickstart is among the blocks, runnable, and ends in an assert."""
    readme = read_blocks(ROOT / "README.md")
    assert readme, "no python block in README.md"
    assert readme[0].skip is None
    assert "assert " in readme[0].code


def test_a_skip_marker_applies_to_the_next_block_only(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "text\n\n<!-- example: skip needs a server -->\n```python\nx = 1\n```\n\n  ```python\n  y = 2\n  ```\n",
        encoding="utf-8",
    )
    first, second = read_blocks(page, root=tmp_path)
    assert (first.page, first.skip, first.code) == ("page.md", "needs a server", "x = 1\n")
    assert (second.skip, second.code, second.line) == (None, "y = 2\n", 8)


def test_the_firewall_example_holds_with_minilm(
    minilm_model: object, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The safeguards page's example blocks the same items with MiniLM as with the hashing embedder."""
    (block,) = read_blocks(ROOT / "docs" / "concepts" / "safeguards.md")
    assert 'embedder="hashing"' in block.code
    monkeypatch.chdir(tmp_path)
    ns: dict[str, object] = {"__name__": "__docs_example__", "_minilm": minilm_model}
    exec(compile(block.code.replace('embedder="hashing"', "embedder=_minilm"), block.page, "exec"), ns)
