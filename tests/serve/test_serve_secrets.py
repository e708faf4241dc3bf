"""Secrets from the environment or a file, not the command line (issue 45): ``--metrics-key-file``,
and warnings for ``--metrics-key`` and a password in ``--db``."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx
from servekit import KEY_A, METRICS_KEY, serve_process

from lamina.cli.serve_commands import _secrets_on_the_command_line


def _args(**kw: object) -> argparse.Namespace:
    return argparse.Namespace(**{"db": "m.db", "metrics_key": None, **kw})


def test_secrets_on_the_command_line_are_warned_about() -> None:
    assert _secrets_on_the_command_line(_args()) == []
    assert _secrets_on_the_command_line(_args(db="postgresql://lamina@db/lamina")) == []
    (w,) = _secrets_on_the_command_line(_args(db="postgresql://lamina:hunter2@db/lamina"))
    assert "PGPASSWORD" in w and "hunter2" not in w
    (w,) = _secrets_on_the_command_line(_args(metrics_key=METRICS_KEY))
    assert "LAMINA_METRICS_KEY" in w and METRICS_KEY not in w


def test_the_metrics_key_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "metrics.key"
    f.write_text(METRICS_KEY + "\n", encoding="utf-8")
    args = ["--db", ":memory:", "--embedder", "hashing", "--metrics-key-file", str(f)]
    with serve_process(tmp_path, args, env_keys=f"a:{KEY_A}") as sp:
        assert httpx.get(sp.url + "/metrics", headers={"Authorization": f"Bearer {METRICS_KEY}"}).status_code == 200
        assert httpx.get(sp.url + "/metrics", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 401
    assert "warning" not in sp.log.read_text()
