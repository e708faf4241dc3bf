"""lamina.integrations itself: importing it loads no framework, and an adapter whose framework
is missing fails to import with an ImportError naming the extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ADAPTERS = {
    "langgraph_store": "langgraph",
    "langchain_memory": "langchain_core",
    "openai_agents": "agents",
    "autogen_memory": "autogen_core",
    "llamaindex_memory": "llama_index",
}

CODE = f"""
import importlib, sys
import lamina, lamina.integrations
frameworks = {sorted(set(ADAPTERS.values()))!r}
assert not [m for m in frameworks if m in sys.modules], [m for m in frameworks if m in sys.modules]
for module, framework in {ADAPTERS!r}.items():
    blocked = {{k: None for k in list(sys.modules) if k == framework or k.startswith(framework + ".")}}
    blocked[framework] = None  # (None in sys.modules: the import fails as if it were not installed)
    saved = {{k: sys.modules.get(k) for k in blocked}}
    sys.modules.update(blocked)
    try:
        importlib.import_module("lamina.integrations." + module)
    except ImportError as e:
        assert 'pip install "lamina[integrations]"' in str(e), (module, str(e))
    else:
        raise AssertionError(module + " imported without " + framework)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
        sys.modules.pop("lamina.integrations." + module, None)
print("ok")
"""


def test_missing_frameworks_say_what_to_install() -> None:
    env = dict(os.environ)
    flags: list[str] = []
    if sys.flags.no_site:  # (as tests/test_layering.py: a site-less worktree run is given its path)
        env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "python"), *sys.path])
        flags = ["-S"]
    out = subprocess.run([sys.executable, *flags, "-c", CODE], capture_output=True, text=True, env=env, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr
