"""The generated reference pages (docs/hooks/generate.py) and the command line's own help."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import lamina
from lamina.cli.entry import build_parser, main

ROOT = Path(__file__).resolve().parents[2]


def _hook() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_hook_generate", ROOT / "docs" / "hooks" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commands(parser: argparse.ArgumentParser, prefix: str = "lamina") -> list[str]:
    out: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append(f"{prefix} {name}")
                out.extend(_commands(sub, f"{prefix} {name}"))
    return out


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"lamina {lamina.__version__}"


def test_help_lists_every_command_on_one_line() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lamina", "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    ).stdout
    lines = out.splitlines()
    top = [c.split()[1] for c in _commands(build_parser()) if c.count(" ") == 1]
    assert len(top) >= 10
    for name in top:
        (line,) = [ln for ln in lines if ln.split()[:1] == [name]]
        assert len(line.split()) > 1, f"`{name}` has no one-line summary in `lamina --help`"


def test_the_cli_reference_documents_every_command() -> None:
    page = _hook().cli_markdown()
    for command in _commands(build_parser()):
        assert f"`{command}`" in page, command


def test_the_http_reference_documents_every_route() -> None:
    hook = _hook()
    spec = hook.openapi_spec()
    page = hook.http_markdown(spec)
    assert "/v1/context" in spec["paths"]
    for path, ops in spec["paths"].items():
        for method in ops:
            assert f"## `{method.upper()} {path}`" in page
    for name in spec["components"]["schemas"]:
        assert f"### {name}" in page


def test_the_readme_links_resolve() -> None:
    """The README is not part of the site, so the strict build does not check its links: this does."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme) if "://" not in t]
    assert len(targets) >= 20
    missing = [t for t in targets if not (ROOT / t).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
