"""Store fixtures over both backends: SQLite (in memory and on disk) and PostgreSQL.

The PostgreSQL server is the one ``COMPACTION_TEST_POSTGRES`` names
(``postgresql://user@host:port/database``); ``.ci/run`` starts one with ``.ci/postgres``
and exports it, and without it the first test that needs one starts a throwaway server the
same way (see :func:`postgres_server`).  A test that cannot get one fails, it never skips.  Each
PostgreSQL store is a fresh schema (``?store=t_<random>``), dropped after the test, so
tests share one database and never see each other's rows.

Use in a test module::

    from store_backends import every_backend_store  # noqa: F401  (the store fixture over every backend)
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from compaction.store import SQLiteStore
from compaction.store.factory import open_store
from compaction.store.postgres import PostgresStore

#: The backends a parametrized test runs on.
BACKENDS = ("sqlite", "postgres")

_ENV = "COMPACTION_TEST_POSTGRES"
_POSTGRES_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "postgres"
_admin: Any = None


def postgres_server() -> str:
    """Return the test server's URL (without ``?store``).

    ``COMPACTION_TEST_POSTGRES`` when set (``.ci/run`` exports one); otherwise a throwaway
    server started once for this test run with ``.ci/postgres`` (which installs Debian's
    ``postgresql`` when it is missing) and stopped when the run ends, so the README's test
    command works on a fresh machine.  A server that cannot be started fails the test.
    """
    url = os.environ.get(_ENV, "").strip()
    if url:
        return url
    directory = tempfile.mkdtemp(prefix="compaction-test-pg-")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = subprocess.run(
        [str(_POSTGRES_SCRIPT), "start", directory, str(port)], capture_output=True, text=True, timeout=600
    )
    if started.returncode != 0 or not started.stdout.strip().startswith("postgresql://"):
        pytest.fail(
            f"no PostgreSQL for the tests: {_ENV} is not set and `.ci/postgres start` failed "
            f"({started.stderr.strip().splitlines()[-1:] or started.returncode}); start one and export {_ENV}"
        )
    url = started.stdout.strip().splitlines()[-1]
    os.environ[_ENV] = url  # subprocesses of later tests find the same server
    atexit.register(subprocess.run, [str(_POSTGRES_SCRIPT), "stop", directory], capture_output=True, timeout=120)
    return url


def new_postgres_url() -> str:
    """Return the URL of a store (schema) no test has used yet."""
    return f"{postgres_server()}?store=t_{uuid.uuid4().hex[:16]}"


def drop_postgres_store(url: str) -> None:
    """Drop the schema of the store at ``url`` (and everything in it), if it exists."""
    global _admin
    import psycopg

    from compaction.store.postgres import parse_store_url

    conninfo, name, _shown = parse_store_url(url)
    if _admin is None or _admin.closed:
        _admin = psycopg.connect(conninfo, autocommit=True)
    _admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def admin_connection() -> Any:
    """Return a psycopg connection to the test database (autocommit), shared by the tests."""
    global _admin
    import psycopg

    if _admin is None or _admin.closed:
        _admin = psycopg.connect(postgres_server(), autocommit=True)
    return _admin


@contextmanager
def store_location(backend: str, tmp_path: Path) -> Iterator[str]:
    """Yield where a new store of ``backend`` lives (a file path or a URL); remove it after."""
    if backend == "sqlite":
        yield str(tmp_path / f"store-{uuid.uuid4().hex[:8]}.sqlite")
        return
    url = new_postgres_url()
    try:
        yield url
    finally:
        drop_postgres_store(url)


@contextmanager
def fresh_store(backend: str, tmp_path: Path | None = None, **options: Any) -> Iterator[SQLiteStore | PostgresStore]:
    """Yield a new, empty store of ``backend`` (``memory``, ``file``, ``sqlite`` or ``postgres``); closed and removed after."""
    if backend in ("memory", "sqlite") and tmp_path is None:
        with SQLiteStore(":memory:", **options) as opened:
            yield opened
        return
    kind = "sqlite" if backend in ("memory", "file", "sqlite") else "postgres"
    with store_location(kind, tmp_path or Path("/nonexistent")) as location:
        opened = open_store(location, **options)
        try:
            yield opened
        finally:
            opened.close()


@pytest.fixture(name="store", params=["memory", "file", "postgres"])
def every_backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SQLiteStore | PostgresStore]:
    """A fresh store: SQLite ``:memory:``, an SQLite file, or a PostgreSQL schema; removed after the test."""
    with fresh_store(request.param, None if request.param == "memory" else tmp_path) as opened:
        yield opened


@pytest.fixture(name="location", params=BACKENDS)
def every_backend_location(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Where a new store lives, per backend: an SQLite file path or a PostgreSQL URL (reopen it with ``open_store``)."""
    with store_location(request.param, tmp_path) as where:
        yield where


def branch_chain(location: str, depth: int, summary_every: int = 50) -> str:
    """Build a chain of ``depth`` branches at ``location`` (a store path or URL); return the deepest's name.

    ``c0`` holds one user message, ``root``.  Then for each level ``n`` from 1 to ``depth`` the
    conversation ``c{n-1}`` is opened in a fresh store object (as an agent opening its branch
    does), appends the assistant message ``a{n}``, at every ``summary_every``-th level adds a
    level-1 summary of what it shows past its level-1 frontier, and is forked at its end as
    ``c{n}``.  So ``c{depth}`` (the name returned) shows ``depth + 1`` messages and
    ``depth // summary_every`` summaries; shared by tests/test_deep_branch_compile.py and
    bench/bench_branches.py.
    """
    from compaction import Message

    def text(role: str, body: str) -> Message:
        return Message(role=role, content=[{"type": "text", "text": body}])

    with open_store(location, conversation="c0", create=True) as store:
        store.append([text("user", "root")])
    name = "c0"
    for level in range(1, depth + 1):
        with open_store(location, conversation=name) as store:
            store.append([text("assistant", f"a{level}")])
            if level % summary_every == 0:
                start = store.summary_frontier(1)
                summary = f"messages {start} to {store.next_seq() - 1}"
                store.add_summary(1, start, store.next_seq(), summary, {})
            store.branch(f"c{level}", store.next_seq())
        name = f"c{level}"
    return name
