"""Imports flow one way: no module of the package imports the package root, the module graph is
acyclic, and each folder imports only the folders below it — a rule per folder of the package
(``lamina.text`` and ``lamina.native`` at the bottom, the memory loop over them, its front ends on
top) and per folder of ``lamina.memory`` (store -> state -> dump -> write / read -> façade)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "python" / "lamina"

# lamina.memory, folder by folder: what each may import of the memory outside its own folder
# (modules of one folder import each other freely; the acyclicity check orders them). "base" are
# the memory's own types and checks at its root (config, inputs, reports, types), "top" the façade
# and what it is made of (host, pgarchive, facade, aio).
MEMORY_FOLDERS: dict[str, set[str]] = {
    "store": set(),  # persistence (the only SQL): the bottom
    "base": set(),
    "state": {"store", "base"},  # the in-memory state over the store
    "dump": {"state", "store", "base"},  # the export format and one user's export / import
    "write": {"state", "store", "base"},
    "read": {"dump", "state", "store", "base"},
    "top": {"read", "write", "dump", "state", "store", "base"},
}
MEMORY_BASE = ("config", "inputs", "reports", "types", "metadata")
MEMORY_TOP = ("host", "pgarchive", "service_records", "opening", "facade", "aio", "bulk")
# stated exceptions: (importer, imported) -> why
MEMORY_EXCEPTIONS = {
    (
        "lamina.memory.read.inspection",
        "lamina.memory.write.notes",
    ): "a turn's note is read by the module that writes it",
}
# lamina.memory.dump.jsonl (whole memories to and from JSONL) opens and fills a Memory: the one
# module of the memory above the façade
MEMORY_ABOVE_FACADE = ("lamina.memory.dump.jsonl",)


# lamina.model: file reading and text handling below the runtime that ties them together.
MODEL_LEVELS = {
    "gguf_file": 0,
    "chat_template": 0,
    "sampling": 0,
    "position": 0,
    "native": 0,
    "tokenizer": 1,
    "calibration": 1,
    "weights": 1,
    "press": 1,
    "generate": 2,
    "prompts": 3,
    "forward": 4,
    "runtime": 5,
    "loading": 6,
    "pamqa": 6,
    "backtrack": 6,
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        parts = list(p.relative_to(PKG.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name: str) -> list[tuple[str, int, list[str]]]:
    """(imported module, line, names) for every import of lamina modules in module ``name``."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    here = name if _is_package(name) else name.rsplit(".", 1)[0]
    out: list[tuple[str, int, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((a.name, node.lineno, []) for a in node.names if a.name.split(".")[0] == "lamina")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] == "lamina":
                out.append((target, node.lineno, [a.name for a in node.names]))
    return out


def test_found_the_package() -> None:
    assert "lamina" in MODULES and "lamina.memory.facade" in MODULES and len(MODULES) > 30


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n != "lamina"))
def test_no_module_imports_the_package_root(name: str) -> None:
    for target, line, names in _imports(name):  # from lamina import X: X must be a submodule
        assert target != "lamina" or all(f"lamina.{n}" in MODULES or n == "_core" for n in names), (
            f"{name}:{line} imports {names} from the package root; import them from their module"
        )


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for name in MODULES:
        deps = set()
        for target, _, names in _imports(name):
            for n in names or [""]:
                sub = f"{target}.{n}" if n else target
                if sub in MODULES:
                    deps.add(sub)
                elif target in MODULES:
                    deps.add(target)
        deps.discard(name)
        g[name] = deps
    return g


def test_module_graph_is_acyclic_below_the_packages() -> None:
    """A package's __init__ re-exports its modules, so edges into a package are edges into its
    __init__; modules below it never import it (checked above), which leaves no cycle."""
    g = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> None:
        state[n] = 1
        stack.append(n)
        for d in sorted(g[n]):
            if _is_package(d) and n.startswith(d + "."):
                continue  # a module importing a sibling through its own package
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(d) :] + [d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[n] = 2

    for n in sorted(g):
        if n not in state:
            visit(n)


def _memory_folder(name: str) -> str:
    """The MEMORY_FOLDERS key of a module of lamina.memory."""
    parts = name.split(".")[2:]
    if len(parts) > 1 or _is_package(f"lamina.memory.{parts[0]}"):
        return parts[0]
    if parts[0] in MEMORY_BASE:
        return "base"
    assert parts[0] in MEMORY_TOP, f"lamina.memory.{parts[0]}: add it to MEMORY_BASE or MEMORY_TOP"
    return "top"


def _deps(name: str) -> list[tuple[str, int]]:
    """(imported module, line) for the lamina modules module ``name`` imports."""
    out = []
    for target, line, names in _imports(name):
        for n in names or [""]:
            full = f"{target}.{n}" if f"{target}.{n}" in MODULES else target
            if full == "lamina" and n == "_core":
                full = "lamina._core"
            out.append((full, line))
    return out


@pytest.mark.parametrize("folder", sorted(MEMORY_FOLDERS))
def test_memory_folders_import_only_the_folders_below(folder: str) -> None:
    for name in MODULES:
        if not name.startswith("lamina.memory.") or name in MEMORY_ABOVE_FACADE or _memory_folder(name) != folder:
            continue
        for full, line in _deps(name):
            if not full.startswith("lamina.memory."):
                assert full != "lamina.memory" or name == "lamina.memory.aio", f"{name}:{line} imports the package root"
                continue
            dep = _memory_folder(full)
            if dep == folder or (name, full) in MEMORY_EXCEPTIONS:
                continue
            assert full not in MEMORY_ABOVE_FACADE, f"{name}:{line} imports {full}, which is above the façade"
            assert dep in MEMORY_FOLDERS[folder], f"{name}:{line} ({folder}/) imports {full} ({dep}/)"


# The package's folders: what each may import of lamina outside itself; lamina.errors and the
# compiled core are below them all. The memory never imports its front ends (client, serve, cli),
# the evaluation, the agent, the model runtime or the KV-cache methods.
ROOT_FOLDERS: dict[str, tuple[str, ...]] = {
    "text": (),  # stemming, time expressions, memos, the domain lexicon
    "native": ("lamina.text",),  # the typed wrappers over _core (the lexical index stems)
    "llm": ("lamina.text", "lamina.native", "lamina.model"),  # protocols, chat models (LocalChat: the model)
    "embedders": (),
    "reasoning": (),
    "memory": ("lamina.text", "lamina.native", "lamina.llm", "lamina.embedders"),
    # the framework adapters (lamina.integrations): over the public memory API only
    "integrations": ("lamina.memory",),
}


@pytest.mark.parametrize("folder", sorted(ROOT_FOLDERS))
def test_root_folders_import_only_what_is_below_them(folder: str) -> None:
    allowed = ("lamina._core", "lamina.errors", f"lamina.{folder}", *ROOT_FOLDERS[folder])
    for name in MODULES:
        if name == f"lamina.{folder}" or name.startswith(f"lamina.{folder}."):
            for full, line in _deps(name):
                assert full.startswith(allowed), f"{name}:{line} imports {full}"


def test_the_package_root_holds_only_the_package_files() -> None:
    """Every module lives in a folder but the root's ``__init__``, ``errors`` and ``__main__``."""
    files = {p.name for p in PKG.iterdir() if p.is_file()}
    assert files == {"__init__.py", "errors.py", "__main__.py", "_core.pyi", "py.typed"}, files


# basenames that may stand in more than one folder: the package markers
SHARED_BASENAMES = {"__init__", "__main__"}


def test_each_module_name_stands_once() -> None:
    """No two modules share a basename: a module's name says its concept without its folder."""
    by_name: dict[str, set[str]] = {}
    for p in PKG.rglob("*.py"):
        by_name.setdefault(p.stem, set()).add(p.relative_to(PKG).as_posix())
    repeated = {name: sorted(places) for name, places in by_name.items() if len(places) > 1}
    assert set(repeated) <= SHARED_BASENAMES, {k: v for k, v in repeated.items() if k not in SHARED_BASENAMES}


def test_folders_and_files_stay_small() -> None:
    """No folder of lamina.memory over 12 modules, no Python file over 600 lines."""
    for d in [PKG / "memory", *(p for p in (PKG / "memory").iterdir() if (p / "__init__.py").is_file())]:
        assert len(list(d.glob("*.py"))) <= 12, d
    for p in PKG.rglob("*.py"):
        assert len(p.read_text(encoding="utf-8").splitlines()) <= 600, p


CLI = "lamina.cli."


def test_the_command_line_is_on_top() -> None:
    """Nothing imports lamina.cli but the command line itself and ``python -m lamina``; the one
    exception is its progress bar, a leaf that the evaluation draws too."""
    assert not [t for t, _, _ in _imports("lamina.cli.progress") if t.startswith("lamina")]
    for name in MODULES:
        if name.startswith(CLI) or name in ("lamina.cli", "lamina.__main__"):
            continue
        for full, line in _deps(name):
            if full == "lamina.cli" or full.startswith(CLI):
                assert full == "lamina.cli.progress" and name.startswith("lamina.eval."), (
                    f"{name}:{line} imports {full}"
                )


def test_timeref_is_a_leaf() -> None:
    """lamina.text.timeref (relative time expressions) is plain calendar arithmetic: it imports no
    other lamina module but the leaf memo (``lamina.text._memo``, over the native core), so the
    memory's types, records and retrieval can all use it."""
    assert "lamina.text.timeref" in MODULES
    assert not [t for t, _, _ in _imports("lamina.text.timeref") if t.startswith("lamina") and t != "lamina.text._memo"]
    assert [t for t, _, _ in _imports("lamina.text._memo") if t.startswith("lamina")] == ["lamina._core"]


def _check_levels(package: str, levels: dict[str, int], outside: Callable[[str], bool]) -> None:
    """``lamina.<package>`` holds the modules of ``levels``; each imports, inside the package, only
    modules of lower levels, and outside it only what ``outside`` accepts (never the package root)."""
    prefix = f"lamina.{package}."
    assert {n.split(".")[-1] for n in MODULES if n.startswith(prefix)} == set(levels)
    for mod, level in levels.items():
        for target, line, names in _imports(prefix + mod):
            for n in names or [""]:
                full = f"{target}.{n}" if f"{target}.{n}" in MODULES else target
                if not full.startswith(prefix):
                    assert full != prefix[:-1], f"{prefix}{mod}:{line} imports the package root"
                    assert outside(full), f"{prefix}{mod}:{line} imports {full}"
                    continue
                dep = full.split(".")[2]
                assert levels[dep] < level, f"{prefix}{mod} (level {level}) imports {prefix}{dep} (level {levels[dep]})"


def test_model_modules_import_only_lower_levels() -> None:
    """lamina.model's modules import only lower levels of the package, and outside it only the
    layers it builds on (the native core, errors, lamina.kv) — never the memory loop, eval or cli."""
    _check_levels(
        "model", MODEL_LEVELS, lambda m: m == "lamina" or m.startswith(("lamina._core", "lamina.errors", "lamina.kv"))
    )


# lamina.kv: the selection core below one module per method; a method builds on the core and
# on the methods it extends (AdaKV on SnapKV, the CriticalKV pair on SnapKV / AdaKV), never on
# the model or the evaluation that use it.
KV_LEVELS = {
    "_ops": 0,
    "method": 1,
    "streaming": 2,
    "h2o": 2,
    "snapkv": 2,
    "keydiff": 2,
    "kvzip": 2,
    "adakv": 3,
    "pyramidkv": 3,
    "lava": 3,
    "criticalkv": 4,
}


def test_kv_modules_import_only_lower_levels() -> None:
    _check_levels("kv", KV_LEVELS, lambda m: m in ("lamina", "lamina._core", "lamina.native._device"))


def test_the_kv_suite_is_pure_and_the_kv_eval_sits_on_the_model() -> None:
    """lamina.eval.kv_suite (the generated prompts) imports nothing of lamina; lamina.eval.kv
    builds on the model, lamina.kv, the harness and the progress bar, and nothing imports it but
    the command line."""
    assert not [t for t, _, _ in _imports("lamina.eval.kv_suite")]
    for target, line, names in _imports("lamina.eval.kv"):
        for n in names or [""]:
            full = f"{target}.{n}" if f"{target}.{n}" in MODULES else target
            assert full.startswith(
                ("lamina.model", "lamina.kv", "lamina.eval.harness", "lamina.eval.kv_suite", "lamina.cli.progress")
            ), f"lamina.eval.kv:{line} imports {full}"
    for name in MODULES:
        if name not in ("lamina.cli.eval_commands", "lamina.eval.kv"):
            assert "lamina.eval.kv" not in {t for t, _, _ in _imports(name)}, name


# LLM-protocol implementations sit in lamina.llm: OpenAIChat in lamina.llm.openai_chat (with the
# protocol), LocalChat (the local GGUF runtime) in lamina.llm.local_chat, which builds on
# lamina.model and the protocol only; the model package never imports lamina.llm (it knows
# nothing of the LLM protocol).
MODEL_EXTRA_DEPS = ("gguf", "tokenizers", "jinja2")


def test_local_llm_builds_on_the_model_and_the_llm_protocol_only() -> None:
    for target, line, names in _imports("lamina.llm.local_chat"):
        for n in names or [""]:
            full = f"{target}.{n}" if f"{target}.{n}" in MODULES else target
            assert full in ("lamina.llm.openai_chat", "lamina.errors") or full.startswith("lamina.model."), (
                f"lamina.llm.local_chat:{line} imports {full}"
            )
    for name in MODULES:
        if name.startswith("lamina.model"):
            for target, line, _ in _imports(name):
                assert not target.startswith("lamina.llm"), f"{name}:{line} imports {target}"
    assert not _top_level_imports("lamina.llm.local_chat") & set(MODEL_EXTRA_DEPS)


def test_import_lamina_loads_no_model_extra() -> None:
    """``import lamina`` (which exports LocalChat) loads none of gguf, tokenizers, jinja2."""
    code = (
        "import sys, lamina; assert lamina.LocalChat; "
        f"print(sorted(m for m in {MODEL_EXTRA_DEPS!r} if m in sys.modules))"
    )
    out = _python(code)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _python(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter on the lamina this process imported: a site-less
    process (a worktree) is given its path; an installed or editable one is found as usual (the
    source tree alone has no _core)."""
    env = dict(os.environ)
    flags: list[str] = []
    if sys.flags.no_site:
        env["PYTHONPATH"] = os.pathsep.join([str(PKG.parent), *sys.path])
        flags = ["-S"]
    return subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True, env=env, check=True)


def test_import_lamina_loads_at_most_half_of_the_package() -> None:
    """``import lamina`` loads the memory loop and what it stands on; the model runtime, the
    KV-cache methods, the fleet step, the clients, the service, the evaluation and the command
    line load when first used."""
    code = "import sys, lamina; print(sum(1 for m in sys.modules if m.startswith('lamina.')))"
    out = _python(code)
    assert int(out.stdout) <= len(MODULES) // 2, (out.stdout, len(MODULES))


# The service sits on top: lamina.serve (FastAPI, the MCP server), lamina.client (httpx, the wire
# format) and lamina.memory.aio build on the memory; nothing below imports them, and what is
# imported by the package root or the command line imports no optional server dependency at
# module level.
SERVICE = ("lamina.serve", "lamina.client", "lamina.memory.aio")
SERVER_DEPS = ("fastapi", "starlette", "uvicorn", "pydantic", "prometheus_client", "httpx")


def _top_level_imports(name: str, *, relative: bool = False) -> set[str]:
    """Top-level package names imported at module level (not inside functions or TYPE_CHECKING);
    with ``relative``, the lamina modules imported there instead."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    if relative:
        lines = {n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))}
        return {t for t, line, _ in _imports(name) if line in lines}
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            out.add(node.module.split(".")[0])
    return out


def test_nothing_below_the_service_imports_it() -> None:
    for name in MODULES:
        if name.startswith(SERVICE) or name == "lamina" or name.startswith(CLI):
            continue
        for target, line, names in _imports(name):
            full = [f"{target}.{n}" for n in names] or [target]
            assert not any(f.startswith(SERVICE) or target.startswith(SERVICE) for f in full), (
                f"{name}:{line} imports {target} {names}"
            )
    # the command line imports the service inside the commands that run it, never at module level
    for name in MODULES:
        if name.startswith(CLI):
            assert not {t for t in _top_level_imports(name, relative=True) if t.startswith(SERVICE)}, name


def test_optional_server_dependencies_load_lazily() -> None:
    light = ["lamina", "lamina.serve", "lamina.client", "lamina.client.wire", "lamina.memory.aio"]
    for name in light + [n for n in MODULES if n.startswith(CLI)]:
        assert not _top_level_imports(name) & set(SERVER_DEPS), f"{name} imports a server dependency at module level"
    # the client needs httpx only
    assert _top_level_imports("lamina.client.http_client") & set(SERVER_DEPS) == {"httpx"}


# lamina.agent: the agent side over the public Memory API (chat models, schemas and the bandit at
# the bottom, the virtual context over them, the dispatcher, then the loop).
AGENT_LEVELS = {
    "tool_chat": 0,
    "tool_schemas": 0,
    "memcon": 0,
    "context": 1,
    "tools": 2,
    "loop": 3,
}


def test_agent_modules_import_only_lower_levels() -> None:
    """lamina.agent's modules import only lower levels of the package, and outside it only the
    layers below the agent (lamina.llm, the memory facade) — never eval, cli or serve."""
    _check_levels("agent", AGENT_LEVELS, lambda m: m.startswith(("lamina.llm", "lamina.memory", "lamina.errors")))


def test_the_inspector_sits_on_the_service_and_below_its_app() -> None:
    """lamina.serve.ui (the /ui pages) builds on the service's modules and the memory; the app
    includes it (lazily: Jinja2 loads only when the app is built), it never imports the app."""
    ui = [n for n in MODULES if n.startswith("lamina.serve.ui")]
    assert ui
    for name in ui:
        for target, line, names in _imports(name):
            full = [f"{target}.{n}" for n in names] or [target]
            assert not any(
                f.startswith(("lamina.serve.app", "lamina.cli.serve_commands", "lamina.serve.mcp")) for f in full
            ), f"{name}:{line} imports {target} {names}"
    app = ast.parse(MODULES["lamina.serve.app"].read_text(encoding="utf-8"))
    top = [n for n in app.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not any(isinstance(n, ast.ImportFrom) and n.level and (n.module or "").startswith("ui") for n in top)
    assert "jinja2" not in _top_level_imports("lamina.serve.app")


def test_reasoning_is_self_contained() -> None:
    """lamina.reasoning (step checkers, the mistake localiser) imports only itself: checkers
    below the locator, nothing of the memory, model or eval."""
    assert {"lamina.reasoning.checkers", "lamina.reasoning.locator"} <= set(MODULES)
    assert not [t for t, _, _ in _imports("lamina.reasoning.checkers") if t.startswith("lamina")]
    for target, line, _ in _imports("lamina.reasoning.locator"):
        assert not target.startswith("lamina") or target == "lamina.reasoning.checkers", f"locator:{line} {target}"
    for target, line, _ in _imports("lamina.reasoning.stepcheck"):
        assert not target.startswith("lamina") or target == "lamina.reasoning.checkers", f"stepcheck:{line} {target}"


def test_nothing_imports_the_integrations() -> None:
    """lamina.integrations (the framework adapters) sits on top: no other module imports it, and
    its package imports no framework (each adapter module imports its own when imported)."""
    assert "lamina.integrations" in MODULES
    for name in MODULES:
        if name.startswith("lamina.integrations"):
            continue
        for target, line, names in _imports(name):
            full = [f"{target}.{n}" for n in names] or [target]
            assert not any(f.startswith("lamina.integrations") for f in [target, *full]), (
                f"{name}:{line} imports {target}"
            )
    assert not _top_level_imports("lamina.integrations") - {"__future__"}
