"""The PostgreSQL store: URLs, schemas and migrations, parity with SQLite, hostile input.

The store suite itself runs on both backends (tests/test_store.py, tests/test_store_interface.py);
this module tests what only PostgreSQL has (a URL, a schema per store, its own migrations,
a dropped schema) and that compile, compress_and_compile and compaction events give the
same bytes on both backends.  Concurrency and kills are in tests/test_store_postgres_processes.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from store_backends import (
    BACKENDS,
    admin_connection,
    drop_postgres_store,
    every_backend_store,  # noqa: F401  (the store fixture over every backend)
    fresh_store,
    new_postgres_url,
    postgres_server,
)
from strategies import png_b64

from compaction import Message, Recipe, StoreError, compile_request, compress_and_compile, load_transcript
from compaction.errors import InvalidArgument
from compaction.store import SQLiteStore
from compaction.store.factory import compaction_claim, list_conversations, open_store
from compaction.store.ingest import token_key
from compaction.store.postgres import PostgresStore, parse_store_url
from compaction.store.postgres_schema import MIGRATIONS_TABLE, PG_MIGRATIONS, PG_SCHEMA_VERSION
from compaction.tokens.encodings import DEFAULT_ENCODING

EXAMPLES = Path(__file__).parent.parent / "examples"
PI = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"


def text(role: str, value: str) -> Message:
    return Message(role, ({"type": "text", "text": value},))


# -- URLs ---------------------------------------------------------------------------------
def test_a_url_names_the_database_the_store_and_hides_the_password() -> None:
    conninfo, name, shown = parse_store_url("postgresql://me:s3cret@db.example:5433/agents?store=alice&sslmode=require")
    assert name == "alice"
    assert shown == "postgresql://me:***@db.example:5433/agents?store=alice&sslmode=require"
    assert conninfo == "postgresql://me:s3cret@db.example:5433/agents?sslmode=require"
    assert parse_store_url("postgres://h/agents")[1] == "compaction"


@pytest.mark.parametrize(
    "url,says",
    [
        ("postgresql://h/agents?store=Alice", "lowercase"),
        ("postgresql://h/agents?store=1abc", "lowercase"),
        ("postgresql://h/agents?store=a;drop", "lowercase"),
        ("postgresql://h/?store=a", "name a database"),
        ("mysql://h/agents", "not a PostgreSQL store URL"),
    ],
)
def test_a_bad_url_is_a_store_error_that_says_why(url: str, says: str) -> None:
    with pytest.raises(StoreError, match=says):
        parse_store_url(url)


def test_open_store_picks_the_backend_by_location(tmp_path: Path) -> None:
    with open_store(tmp_path / "a.sqlite") as store:
        assert type(store) is SQLiteStore
    url = new_postgres_url()
    try:
        with open_store(url) as store:
            assert type(store) is PostgresStore and store.name == url.rsplit("=", 1)[1]
    finally:
        drop_postgres_store(url)
    with pytest.raises(InvalidArgument):
        open_store(42)  # type: ignore[arg-type]


def test_an_unreachable_server_is_a_store_error_naming_the_url_without_the_password() -> None:
    with pytest.raises(StoreError) as caught:
        PostgresStore("postgresql://me:pw@127.0.0.1:1/agents?store=x", connect_timeout=2)
    assert "postgresql://me:***@127.0.0.1:1/agents?store=x" in str(caught.value)
    assert "pw@" not in str(caught.value) and "cannot" in str(caught.value)


# -- schemas and migrations -----------------------------------------------------------------
def test_a_missing_store_is_refused_without_create_and_nothing_is_made() -> None:
    url = new_postgres_url()
    name = parse_store_url(url)[1]
    with pytest.raises(StoreError, match="no store there"):
        PostgresStore(url, create=False)
    assert admin_connection().execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (name,)).fetchone() is None


def test_a_schema_of_another_application_is_refused_untouched() -> None:
    url = new_postgres_url()
    name = parse_store_url(url)[1]
    admin = admin_connection()
    try:
        admin.execute(f'CREATE SCHEMA "{name}"')
        admin.execute(f'CREATE TABLE "{name}".orders (id INT PRIMARY KEY, messages TEXT)')
        admin.execute(f"INSERT INTO \"{name}\".orders VALUES (1, 'keep me')")
        with pytest.raises(StoreError, match="not a compaction store.*orders.*left untouched"):
            PostgresStore(url)
        tables = admin.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (name,)
        ).fetchall()
        assert tables == [("orders",)]
        assert admin.execute(f'SELECT messages FROM "{name}".orders').fetchall() == [("keep me",)]
    finally:
        drop_postgres_store(url)


def test_a_new_store_records_its_migrations_and_a_reopen_runs_none() -> None:
    url = new_postgres_url()
    try:
        with PostgresStore(url) as store:
            assert store.schema_migrations() == [(m.version, m.name) for m in PG_MIGRATIONS]
            store.append([text("user", "hi")])
        name = parse_store_url(url)[1]
        admin = admin_connection()
        applied = admin.execute(f'SELECT version, applied_at FROM "{name}".schema_migrations ORDER BY version').fetchall()
        with PostgresStore(url, create=False) as store:
            assert len(store) == 1
        assert admin.execute(f'SELECT version, applied_at FROM "{name}".schema_migrations ORDER BY version').fetchall() == applied
        version = admin.execute(f"SELECT value FROM \"{name}\".meta WHERE key = 'schema_version'").fetchone()
        assert version == (str(PG_SCHEMA_VERSION),)
    finally:
        drop_postgres_store(url)


def test_a_store_from_a_newer_release_is_refused() -> None:
    url = new_postgres_url()
    try:
        PostgresStore(url).close()
        name = parse_store_url(url)[1]
        admin_connection().execute(f"UPDATE \"{name}\".meta SET value = '999' WHERE key = 'schema_version'")
        with pytest.raises(StoreError, match="newer than this compaction"):
            PostgresStore(url)
    finally:
        drop_postgres_store(url)


def _make_schema_1_store(url: str) -> str:
    """Create the store at ``url`` exactly as schema 1 did (its statements, its records); return its schema."""
    name = parse_store_url(url)[1]
    admin = admin_connection()
    admin.execute(f'CREATE SCHEMA "{name}"')
    admin.execute(f'SET search_path TO "{name}"')
    try:
        for statement in PG_MIGRATIONS[0].statements:
            admin.execute(statement)
        admin.execute(MIGRATIONS_TABLE)
        admin.execute("INSERT INTO schema_migrations VALUES (1, %s, 0)", (PG_MIGRATIONS[0].name,))
        admin.execute("INSERT INTO meta VALUES ('schema_version', '1'), ('store_id', 'old')")
        content = json.dumps([{"type": "text", "text": "kept"}])
        admin.execute(
            "INSERT INTO messages (seq, role, content, import_key) VALUES (0, 'user', %s, 'k0'), (1, 'assistant', %s, 'k1')",
            (content, content),
        )
        key = token_key(DEFAULT_ENCODING)
        admin.execute("INSERT INTO token_counts VALUES (0, %s, 5), (1, %s, 5)", (key, key))
        admin.execute(
            "INSERT INTO summaries (level, start_seq, end_seq, text, provenance, created_at)"
            " VALUES (1, 0, 2, 'an old summary'::bytea, '{}', 0)"
        )
        admin.execute("INSERT INTO failures (level, start_seq, end_seq, reason, created_at) VALUES (1, 0, 1, 'x'::bytea, 0)")
    finally:
        admin.execute("SET search_path TO DEFAULT")
    return name


def test_an_old_store_is_upgraded_once_in_place() -> None:
    """A store at schema 1 gains captions and conversations; its rows are the conversation 'default'."""
    url = new_postgres_url()
    try:
        _make_schema_1_store(url)
        with PostgresStore(url) as store:
            assert store.conversation == "default"
            assert [m.text() for m in store.messages()] == ["kept", "kept"]
            assert [(s.start_seq, s.end_seq, s.text) for s in store.summaries()] == [(0, 2, "an old summary")]
            assert [f["reason"] for f in store.failures()] == ["x"]
            assert [f.text_tokens for f in store.facts()] == [5, 5]  # the cached counts kept their key
            assert [v for v, _ in store.schema_migrations()] == [m.version for m in PG_MIGRATIONS]
            assert store.add_caption("ab" * 32, "a red square", {}) is True
            assert store.append([text("user", "new")]) == 1 and len(store) == 3
        [info] = list_conversations(url)
        assert (info.name, info.id, info.messages, info.summaries) == ("default", 1, 3, 1)
    finally:
        drop_postgres_store(url)


def test_two_stores_in_one_database_hold_their_own_conversations() -> None:
    first, second = new_postgres_url(), new_postgres_url()
    try:
        with open_store(first) as a, open_store(second) as b:
            a.append([text("user", "alpha"), text("assistant", "one")], chain_seed="t")
            b.append([text("user", "beta")], chain_seed="t")
            a.add_summary(1, 0, 2, "Asked:\n- alpha", {})
            assert [m.text() for m in a.messages()] == ["alpha", "one"]
            assert [m.text() for m in b.messages()] == ["beta"] and b.summaries() == []
    finally:
        drop_postgres_store(first)
        drop_postgres_store(second)


def test_a_store_dropped_while_open_fails_its_next_write_and_says_so() -> None:
    url = new_postgres_url()
    store = PostgresStore(url)
    try:
        store.append([text("user", "hi")])
        store.check_location()
        drop_postgres_store(url)
        with pytest.raises(StoreError, match="deleted"):
            store.check_location()
        with pytest.raises(StoreError, match="append failed"):
            store.append([text("user", "lost?")])
        PostgresStore(url).close()  # made anew under the same name
        with pytest.raises(StoreError, match="replaced"):
            store.check_location()
    finally:
        store.close()
        drop_postgres_store(url)


def test_the_compaction_claim_is_held_by_one_store_at_a_time() -> None:
    url = new_postgres_url()
    try:
        with PostgresStore(url) as a, PostgresStore(url) as b:
            with compaction_claim(a) as held:
                assert held is True
                with compaction_claim(b, wait=False) as other:
                    assert other is False
                with compaction_claim(a, wait=False) as again:  # claims nest in one store
                    assert again is True
            with compaction_claim(b, wait=False) as other:
                assert other is True
        with SQLiteStore(":memory:") as lone, compaction_claim(lone, wait=False) as held:
            assert held is True
    finally:
        drop_postgres_store(url)


def test_the_compaction_claim_is_per_tree_of_branches() -> None:
    """Conversations of one store compress in parallel; a branch waits for its parent's worker (they share summaries)."""
    url = new_postgres_url()
    try:
        with PostgresStore(url, conversation="main") as main:
            main.append([text("user", "one"), text("assistant", "two")])
            main.branch("alt", 1)
        with PostgresStore(url, conversation="other") as other:
            other.append([text("user", "elsewhere")])
        with (
            PostgresStore(url, conversation="main") as main,
            PostgresStore(url, conversation="alt") as alt,
            PostgresStore(url, conversation="other") as other,
        ):
            with compaction_claim(main) as held:
                assert held is True
                with compaction_claim(other, wait=False) as parallel:
                    assert parallel is True
                with compaction_claim(alt, wait=False) as branch:
                    assert branch is False
            with compaction_claim(alt, wait=False) as branch:
                assert branch is True
    finally:
        drop_postgres_store(url)


# -- the same bytes on both backends ---------------------------------------------------------
def _turn_by_turn(store: SQLiteStore | PostgresStore, messages: list[Message], recipe: Recipe) -> list[bytes]:
    payloads = []
    for end in range(0, len(messages), 12):
        store.append(messages[end : end + 12])
        compiled, _reports = compress_and_compile(store, recipe)
        payloads.append(compiled.request.payload)
    return payloads


def test_compile_and_events_give_the_same_bytes_on_both_backends(tmp_path: Path) -> None:
    """The pi session appended 12 messages a turn, compacted in events: byte-identical requests,
    summaries and events on SQLite and PostgreSQL, and each request between two events extends
    the one before it."""
    messages = list(load_transcript(PI).messages)[:360]
    recipe = Recipe(budget_tokens=12000, chunk_target_tokens=1500)
    results = {}
    for backend in BACKENDS:
        with fresh_store(backend, tmp_path) as store:
            payloads = _turn_by_turn(store, messages, recipe)
            summaries = [(s.level, s.start_seq, s.end_seq, s.text) for s in store.summaries()]
            events = [(e.tokens_before, e.tokens_after, e.budget, e.detail) for e in store.events()]
            facts = store.facts(encoding="cl100k_base", dropped=frozenset({"thinking"}))
            final = compile_request(store, Recipe(budget_tokens=12000, output_format="anthropic")).request.payload
            results[backend] = (payloads, summaries, events, facts, final)
    assert results["sqlite"] == results["postgres"]
    payloads, summaries, events, _facts, _final = results["postgres"]
    assert summaries and events, "the run compacted nothing"
    prefix_kept = 0
    for before, after in zip(payloads, payloads[1:], strict=False):
        old, new = json.loads(before)["messages"], json.loads(after)["messages"]
        if old[:-1] == new[: len(old) - 1]:
            prefix_kept += 1
    assert prefix_kept >= len(payloads) - 1 - len(events), "requests between events did not extend each other"


def test_facts_with_dropped_thinking_are_cached_under_their_own_key(store: SQLiteStore | PostgresStore) -> None:
    thinking = Message("assistant", (
        {"type": "thinking", "thinking": "let me think " * 20, "signature": "sig"},
        {"type": "text", "text": "the answer"},
    ))
    store.append([text("user", "why?"), thinking])
    plain = store.facts()
    dropped = store.facts(dropped=frozenset({"thinking"}))
    assert plain[0].text_tokens == dropped[0].text_tokens  # no thinking: the plain count
    assert plain[1].text_tokens > dropped[1].text_tokens > 0
    assert store.facts(dropped=frozenset({"thinking"})) == dropped  # cached, the same


# -- hostile input behaves as in SQLite --------------------------------------------------------
HOSTILE = [
    Message("user", ({"type": "text", "text": "nul \x00 in the middle\x00"},), source_id="id\x00nul",
            meta={"kind": "tool\x00output"}),
    Message("assistant", ({"type": "text", "text": "lone \ud800 and \udfff surrogates"},), source_id="s\udc80"),
    Message("assistant", ({"type": "tool_use", "id": "t\x00", "name": "x", "input": {"deep": json.loads("[" * 90 + "]" * 90)}},)),
    Message("user", ({"type": "tool_result", "tool_use_id": "t\x00", "content": "big " * 500_000},)),
    Message("user", ({"type": "text", "text": "look"}, {"type": "image", "source": {
        "type": "base64", "media_type": "image/png\x00\ud800", "data": png_b64(7, 5, 2)}})),
    Message("system", ({"type": "text", "text": "\u2028\ufeff\U0001f600 \\u0000 \"quoted\""},)),
]


def test_hostile_text_is_stored_and_read_back_as_sqlite_does(tmp_path: Path) -> None:
    """NUL characters, lone surrogates, a 2 MB tool output, JSON 90 levels deep, an odd media
    type: every backend stores and returns the same messages, facts, summaries and failures."""
    seen = {}
    for backend in BACKENDS:
        with fresh_store(backend, tmp_path) as store:
            assert store.append(HOSTILE, chain_seed="hostile") == len(HOSTILE)
            assert store.append(HOSTILE, chain_seed="hostile") == 0
            store.add_summary(1, 0, 2, "Asked:\n- nul \x00 and \ud800", {"quoted": "\x00\udfff"})
            store.record_failure(1, 2, 4, "refused: \x00 \ud800")
            messages = store.messages()
            assert [(m.role, m.content, m.source_id, m.meta) for m in messages] == [
                (m.role, m.content, m.source_id, m.meta) for m in HOSTILE
            ]
            seen[backend] = (
                messages, store.facts(), store.summaries(), store.failures(), store.blob_hashes(),
                store.pinned_seqs(), store.prompt_seqs(),
            )
    sqlite, postgres = seen["sqlite"], seen["postgres"]
    assert [s.text for s in sqlite[2]] == [s.text for s in postgres[2]] == ["Asked:\n- nul \x00 and \ud800"]
    assert sqlite[3] == postgres[3] and sqlite[4:] == postgres[4:]
    # SQLite's json_extract cuts meta["kind"] at a NUL ("tool"); PostgreSQL keeps it whole.
    # Neither is an output kind, so compile and chunking read both messages the same way.
    assert postgres[1][0].kind == "tool\x00output" and sqlite[1][0].kind == "tool"
    assert sqlite[1][1:] == postgres[1][1:]
    assert [f.is_prompt for f in sqlite[1]] == [f.is_prompt for f in postgres[1]]


def test_text_that_is_no_unicode_at_all_fails_the_same_way_on_both_backends(tmp_path: Path) -> None:
    """A failure reason that is not a string is refused alike; nothing is written."""
    for backend in BACKENDS:
        with fresh_store(backend, tmp_path) as store:
            store.append([text("user", "a"), text("assistant", "b")])
            with pytest.raises(InvalidArgument):
                store.record_failure(1, 0, 2, b"bytes")  # type: ignore[arg-type]
            with pytest.raises(StoreError, match="empty"):
                store.add_summary(1, 0, 2, " \n", {})
            assert store.failures() == [] and store.summaries() == []


def test_the_test_server_is_configured() -> None:
    """CI exports the server's URL; without it every PostgreSQL test fails (none skips)."""
    assert postgres_server().startswith("postgresql://")


# -- the command line ------------------------------------------------------------------------
def test_the_cli_imports_compresses_compiles_and_reports_a_postgres_store(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from compaction.cli import main

    url = new_postgres_url()
    runner = CliRunner()
    try:
        missing = runner.invoke(main, ["stats", "--store", url])
        assert missing.exit_code == 1 and "no store there" in missing.output
        first = runner.invoke(main, ["import", str(PI), "--store", url, "--json"])
        assert first.exit_code == 0, first.output
        again = runner.invoke(main, ["import", str(PI), "--store", url, "--json"])
        assert again.exit_code == 0 and json.loads(again.output)["added"] == 0
        compressed = runner.invoke(main, ["compress", "--store", url, "--budget", "16000", "--json"])
        assert compressed.exit_code == 0, compressed.output
        out = tmp_path / "request.json"
        compiled = runner.invoke(main, ["compile", "--store", url, "--budget", "16000", "--out", str(out)])
        assert compiled.exit_code == 0, compiled.output
        stats = json.loads(runner.invoke(main, ["stats", "--store", url, "--json"]).output)
        with open_store(url, create=False) as store:
            assert stats["messages"] == len(store) == len(load_transcript(PI).messages)
            assert store.summaries() and len(store.events()) == 1
        assert json.loads(out.read_text())["messages"]
    finally:
        drop_postgres_store(url)
