"""python/lamina/_core.pyi against the built lamina._core: every name the stub declares exists
(CUDA-only names may be absent from a build without CUDA), every public name of the module is
declared, and every function's / method's parameter names, kinds and defaults match the
signature pybind11 writes at the head of its ``__doc__`` (``name(arg: type = default, ...)``)."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

from lamina import _core

STUB = Path(__file__).resolve().parents[1] / "python" / "lamina" / "_core.pyi"
HELPER_BASES = {"TypedDict", "Protocol"}  # stub-only types (typed dicts of returned dicts)
ALWAYS_BUILT = {"cuda_device_count", "cuda_selftest"}


def _cuda_only(name: str) -> bool:
    return (name.startswith("cuda_") or name.startswith("Cuda")) and name not in ALWAYS_BUILT


def _stub_tree() -> ast.Module:
    return ast.parse(STUB.read_text(encoding="utf-8"), filename=str(STUB))


def _is_helper(node: ast.ClassDef) -> bool:
    return any(isinstance(b, ast.Name) and b.id in HELPER_BASES for b in node.bases)


def _decorators(node: ast.FunctionDef) -> set[str]:
    return {d.id for d in node.decorator_list if isinstance(d, ast.Name)}


def _stub_entries() -> list[tuple[str, ast.FunctionDef | ast.ClassDef]]:
    """(qualified name, node) of every module-level function and class, and every method."""
    out: list[tuple[str, ast.FunctionDef | ast.ClassDef]] = []
    for node in _stub_tree().body:
        if isinstance(node, ast.FunctionDef):
            out.append((node.name, node))
        elif isinstance(node, ast.ClassDef) and not _is_helper(node):
            out.append((node.name, node))
            out.extend((f"{node.name}.{m.name}", m) for m in node.body if isinstance(m, ast.FunctionDef))
    return out


def _split_top(s: str) -> list[str]:
    parts, depth, cur, quote = [], 0, "", ""
    for ch in s:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def _doc_params(obj: object, name: str) -> list[tuple[str, str | None]]:
    """(name, default repr or None) from the pybind11 signature line ``name(...) -> ...``."""
    doc = inspect.getdoc(obj) or ""
    m = re.match(rf"{re.escape(name)}\((.*)\) -> ", doc.splitlines()[0] if doc else "")
    assert m, f"{name}: no pybind11 signature at the head of __doc__: {doc[:120]!r}"
    params = []
    for p in _split_top(m.group(1)):
        head, _, default = p.partition(" = ")
        params.append((head.split(":")[0].strip(), default.strip() if default else None))
    return params


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, str | None, bool]]:
    """(name, default repr or None, positional-only) in order, ``self`` included for methods."""
    a = fn.args
    pos = [(x, True) for x in a.posonlyargs] + [(x, False) for x in a.args]
    defaults: list[ast.expr | None] = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
    out = [(x.arg, None if d is None else repr(ast.literal_eval(d)), po) for (x, po), d in zip(pos, defaults)]
    for x, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((x.arg, None if d is None else repr(ast.literal_eval(d)), False))
    return out


def _resolve(qualname: str) -> object | None:
    obj: object = _core
    for part in qualname.split("."):
        if not hasattr(obj, part):
            return None
        obj = inspect.getattr_static(obj, part) if inspect.isclass(obj) else getattr(obj, part)
    return obj


def test_stub_parses_and_declares_something() -> None:
    names = [n for n, _ in _stub_entries()]
    assert "topk" in names and "VectorArena.search" in names


@pytest.mark.parametrize("qualname", [n for n, _ in _stub_entries()])
def test_declared_name_exists(qualname: str) -> None:
    if _resolve(qualname) is None:
        top = qualname.split(".")[0]
        if _cuda_only(top) and not _core.has_cuda():
            pytest.skip(f"{top} exists only in CUDA builds")
        pytest.fail(f"_core.pyi declares {qualname}, which lamina._core does not have")


def test_every_public_name_is_declared() -> None:
    declared = {n for n, _ in _stub_entries()}
    missing = sorted(n for n in dir(_core) if not n.startswith("__") and n not in declared)
    assert not missing, f"lamina._core names missing from _core.pyi: {missing}"


def _functions() -> list[tuple[str, ast.FunctionDef]]:
    return [(n, f) for n, f in _stub_entries() if isinstance(f, ast.FunctionDef)]


@pytest.mark.parametrize("qualname,fn", _functions(), ids=[n for n, _ in _functions()])
def test_signature_matches_binding(qualname: str, fn: ast.FunctionDef) -> None:
    obj = _resolve(qualname)
    if obj is None:
        pytest.skip(f"{qualname} is not in this build")
    decos = _decorators(fn)
    if "property" in decos:
        assert isinstance(obj, property), f"{qualname}: the stub has a property, the binding {type(obj).__name__}"
        return
    stub = _stub_params(fn)
    if "staticmethod" in decos:
        assert isinstance(obj, staticmethod), f"{qualname}: the stub has a staticmethod, the binding does not"
        obj = obj.__func__
    elif "." in qualname:
        assert stub and stub[0][0] == "self", f"{qualname}: a method's first parameter is self"
    doc = _doc_params(obj, fn.name)
    assert len(stub) == len(doc), f"{qualname}: stub has {[p[0] for p in stub]}, binding {[p[0] for p in doc]}"
    overloaded = _overloaded(qualname)
    offset = 1 if stub and stub[0][0] == "self" else 0
    for i, ((s_name, s_default, s_posonly), (d_name, d_default)) in enumerate(zip(stub, doc)):
        unnamed = re.fullmatch(r"arg\d+", d_name) is not None
        if s_name == "self":
            assert d_name == "self", f"{qualname}: the binding's first parameter is {d_name}"
        elif s_posonly:
            # pybind11 names an argument without py::arg "argN"; the stub names it, positional-only
            assert d_name == f"arg{i - offset}", (
                f"{qualname}: {s_name} is positional-only, the binding names it {d_name}"
            )
        else:
            assert not unnamed, f"{qualname}: the binding has no name for {s_name} ({d_name}); make it positional-only"
            assert s_name == d_name, f"{qualname}: parameter {i} is {s_name} in the stub, {d_name} in the binding"
        # an overload may require what the binding defaults (to select a return type)
        if not (overloaded and s_default is None):
            assert s_default == d_default, (
                f"{qualname}: default of {s_name} is {s_default} in the stub, {d_default} in the binding"
            )


def _overloaded(qualname: str) -> bool:
    return sum(1 for n, _ in _functions() if n == qualname) > 1
