"""mkdocs hook: the CLI and HTTP reference pages, generated at build time.

``reference/cli.md`` comes from the argparse parser of ``lamina`` (:func:`lamina.cli.entry.build_parser`):
every command and sub-command with its help as ``lamina ... --help`` prints it. ``reference/http.md``
(and ``reference/openapi.json``) come from the OpenAPI schema of the FastAPI app ``lamina serve``
runs (:func:`lamina.serve.create_app`). Nothing here is written to the source tree.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mkdocs is imported only by the build (the tests import this module without it)
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.structure.files import Files


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, parser) of each sub-command of ``parser``, in definition order."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                out.append((name, helps.get(name, ""), sub))
    return out


def cli_markdown() -> str:
    """The CLI reference: a table of the commands, then each command's ``--help``."""
    from lamina.cli.entry import build_parser

    os.environ["COLUMNS"] = "100"  # argparse wraps at $COLUMNS: the same page on every machine
    root = build_parser()
    lines = [
        "# CLI reference",
        "",
        "Generated from the argparse definitions (`lamina.cli.entry.build_parser`) when the site is built;",
        "`lamina COMMAND --help` prints the same text.",
        "",
        "```text",
        root.format_help().rstrip(),
        "```",
        "",
    ]

    def walk(prefix: str, parser: argparse.ArgumentParser, depth: int) -> None:
        for name, summary, sub in _subparsers(parser):
            full = f"{prefix} {name}"
            lines.extend([f"{'#' * min(depth, 4)} `{full}`", ""])
            if summary:
                lines.extend([summary, ""])
            lines.extend(["```text", sub.format_help().rstrip(), "```", ""])
            walk(full, sub, depth + 1)

    walk("lamina", root, 2)
    return "\n".join(lines)


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    return f"`{schema.get('type', 'any')}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def http_markdown(spec: dict[str, Any]) -> str:
    """The HTTP reference: each route (parameters, body, responses), then each schema's fields."""
    lines = [
        "# HTTP API reference",
        "",
        "Generated from the OpenAPI schema of the app `lamina serve` runs (`lamina.serve.create_app`)",
        "when the site is built; the schema itself: [openapi.json](openapi.json). A running server",
        "serves the same schema at `/openapi.json` and a try-it page at `/docs`. Guide: [serving](../guides/serving.md).",
        "",
    ]
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            lines.extend([f"## `{method.upper()} {path}`", ""])
            if op.get("summary"):
                lines.extend([f"**{op['summary']}**", ""])
            if op.get("description"):
                lines.extend([op["description"].strip(), ""])
            params = op.get("parameters", [])
            if params:
                lines.extend(["| parameter | in | type | required | description |", "|---|---|---|---|---|"])
                for p in params:
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {_schema_type(p.get('schema', {}))} | "
                        f"{'yes' if p.get('required') else 'no'} | {_cell(p.get('description', ''))} |"
                    )
                lines.append("")
            body = op.get("requestBody", {}).get("content", {})
            for ctype, c in body.items():
                lines.extend([f"Body (`{ctype}`): {_schema_type(c.get('schema', {}))}", ""])
            lines.extend(["| status | meaning | body |", "|---|---|---|"])
            for status, r in op.get("responses", {}).items():
                schemas = [_schema_type(c.get("schema", {})) for c in r.get("content", {}).values() if c.get("schema")]
                lines.append(f"| {status} | {_cell(r.get('description', ''))} | {', '.join(schemas)} |")
            lines.append("")
    lines.extend(["## Schemas", ""])
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        lines.extend([f"### {name}", ""])
        if schema.get("description"):
            lines.extend([schema["description"].strip(), ""])
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            lines.extend(["| field | type | required | description |", "|---|---|---|---|"])
            for field, fs in props.items():
                lines.append(
                    f"| `{field}` | {_schema_type(fs)} | {'yes' if field in required else 'no'} | "
                    f"{_cell(fs.get('description', ''))} |"
                )
            lines.append("")
    return "\n".join(lines)


def openapi_spec() -> dict[str, Any]:
    from lamina.serve import ServeConfig, create_app

    spec: dict[str, Any] = create_app(ServeConfig(db=None, embedder="hashing")).openapi()
    return spec


def on_files(files: Files, config: MkDocsConfig) -> Files:
    from mkdocs.structure.files import File

    spec = openapi_spec()
    files.append(File.generated(config, "reference/cli.md", content=cli_markdown()))
    files.append(File.generated(config, "reference/http.md", content=http_markdown(spec)))
    files.append(File.generated(config, "reference/openapi.json", content=json.dumps(spec, indent=1)))
    return files
