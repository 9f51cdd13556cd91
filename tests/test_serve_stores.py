"""The proxy keeps each conversation's stores open between requests (``compaction/serve/stores.py``).

A bounded, least-recently-used set of conversations: the same store object serves every
request of a conversation (so the engine's per-store caches stay warm), the oldest idle
conversation is closed past the bound, a store deleted or replaced on disk is opened again,
and shutdown closes them all.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_support import MockUpstream, conversations, live_server, make_app, post, stored_messages

from compaction import Message, Store
from compaction.errors import InvalidArgument
from compaction.serve.conversations import IncomingMemo, _exact, scrub_messages
from compaction.serve.stores import StorePool

OPENAI = "/v1/chat/completions"


def _history(name: str, turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": f"agent {name}"}]
    for turn in range(turns):
        history += [
            {"role": "user", "content": f"{name} ask {turn}"},
            {"role": "assistant", "content": "done"},
        ]
    return history + [{"role": "user", "content": f"{name} ask {turns}"}]


def _send(app: Any, name: str, turns: int) -> httpx.Response:
    answer = post(
        app,
        OPENAI,
        {"model": "gpt-4o", "messages": _history(name, turns)},
        {"X-Compaction-Conversation": name},
    )
    assert answer.status_code == 200, answer.text
    return answer


def _store_of(app: Any, name: str) -> Store:
    pool = app.state.proxy.pool
    slot = pool._slots[name]
    (store,) = slot.stores._stores.values()
    return store


def test_one_store_object_serves_every_request_of_a_conversation(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    _send(app, "alpha", 0)
    first = _store_of(app, "alpha")
    for turns in range(1, 4):
        _send(app, "alpha", turns)
    assert _store_of(app, "alpha") is first
    slot = app.state.proxy.pool._slots["alpha"]
    assert (slot.stores.opened, slot.stores.reopened) == (1, 0)
    assert len(stored_messages(tmp_path / "stores", "alpha")) == 1 + 2 * 3 + 2  # system, 3 turns, ask, answer


def test_the_least_recently_used_conversation_is_closed_past_the_bound(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream(), open_conversations=2)
    _send(app, "a", 0)
    _send(app, "b", 0)
    _send(app, "a", 1)  # a is now the most recently used
    _send(app, "c", 0)
    pool = app.state.proxy.pool
    assert list(pool._slots) == ["a", "c"] and pool.evicted == 1
    # b comes back: opened again from its file, and its history continues where it was
    _send(app, "b", 1)
    assert list(pool._slots) == ["c", "b"]
    assert [role for role, _ in stored_messages(tmp_path / "stores", "b")] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert conversations(tmp_path / "stores") == ["a", "b", "c"]


def _remove_store(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def test_a_store_deleted_on_disk_is_opened_again(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    _send(app, "alpha", 0)
    path = tmp_path / "stores" / "conversations" / "alpha.sqlite"
    old = _store_of(app, "alpha")
    _remove_store(path)
    _send(app, "alpha", 1)
    assert _store_of(app, "alpha") is not old
    assert app.state.proxy.pool._slots["alpha"].stores.reopened == 1
    # the client resent its whole history: the new file holds all of it and the answer
    assert [role for role, _ in stored_messages(tmp_path / "stores", "alpha")] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]


def test_a_store_replaced_on_disk_is_opened_again(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    _send(app, "alpha", 1)
    path = tmp_path / "stores" / "conversations" / "alpha.sqlite"
    # another store (a copy of an older state: only the system prompt) moved in place of it
    replacement = tmp_path / "other.sqlite"
    with Store(replacement) as other:
        other.append([Message("system", ({"type": "text", "text": "agent alpha"},))])
    _remove_store(path)
    shutil.move(str(replacement), path)
    _send(app, "alpha", 2)
    assert app.state.proxy.pool._slots["alpha"].stores.reopened == 1
    stored = stored_messages(tmp_path / "stores", "alpha")
    assert len(stored) == 1 + 2 * 2 + 2 and stored[-2] == ("user", [{"type": "text", "text": "alpha ask 2"}])


def test_shutdown_closes_every_open_store(tmp_path: Path) -> None:
    app = make_app(tmp_path, MockUpstream())
    pool = app.state.proxy.pool

    async def go() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                for name in ("a", "b", "c"):
                    answer = await client.post(
                        OPENAI,
                        json={"model": "gpt-4o", "messages": _history(name, 0)},
                        headers={"X-Compaction-Conversation": name},
                    )
                    assert answer.status_code == 200
            slots = list(pool._slots.values())
            assert [len(slot.stores) for slot in slots] == [1, 1, 1]
        assert len(pool) == 0
        assert [len(slot.stores) for slot in slots] == [0, 0, 0]  # closed on their threads
        for slot in slots:
            with pytest.raises(RuntimeError, match="shutdown"):
                await slot.run(len, [])  # and the threads ended

    asyncio.run(go())


def test_more_conversations_than_the_bound_from_threads(tmp_path: Path) -> None:
    """16 conversations through a pool of 3, 4 turns each, from 8 threads: nothing lost, no error."""
    upstream = MockUpstream()
    app = make_app(tmp_path, upstream, open_conversations=3)
    failures: list[str] = []
    with live_server(app) as base:

        def client(names: list[str]) -> None:
            with httpx.Client(timeout=60) as http:
                for turns in range(4):
                    for name in names:
                        answer = http.post(
                            f"{base}/chat/completions",
                            json={"model": "gpt-4o", "messages": _history(name, turns)},
                            headers={"X-Compaction-Conversation": name},
                        )
                        if answer.status_code != 200:
                            failures.append(answer.text)

        threads = [threading.Thread(target=client, args=([f"c{2 * n}", f"c{2 * n + 1}"],)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert app.state.proxy.pool.evicted > 0
    assert failures == []
    assert len(conversations(tmp_path / "stores")) == 16
    for n in range(16):
        stored = stored_messages(tmp_path / "stores", f"c{n}")
        assert len(stored) == 1 + 2 * 3 + 2, n  # every turn once, every answer recorded
        assert all(
            f"c{n} " in content[0]["text"] or role in ("system", "assistant") for role, content in stored
        )
    assert len(app.state.proxy.pool) == 0  # closed at shutdown


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 4), uses=st.lists(st.sampled_from("abcdef"), max_size=30))
def test_pool_keeps_the_most_recently_used_conversations(size: int, uses: list[str]) -> None:
    """After any sequence of requests, one at a time, the pool holds the ``size`` most recent."""
    pool = StorePool(size)

    async def go() -> None:
        for base in uses:
            async with pool.hold(base) as slot:
                assert slot.base == base and await slot.run(threading.get_ident) != threading.get_ident()

    asyncio.run(go())
    held, evicted = _lru_model(uses, size)
    assert list(pool._slots) == held and pool.evicted == evicted
    pool.close()
    assert len(pool) == 0


def _lru_model(uses: list[str], size: int) -> tuple[list[str], int]:
    """The reference: a list, most recent last, trimmed to ``size``; and how many were trimmed."""
    held: list[str] = []
    evicted = 0
    for base in uses:
        if base in held:
            held.remove(base)
        held.append(base)
        if len(held) > size:
            evicted += len(held) - size
            del held[:-size]
    return held, evicted


@pytest.mark.parametrize("size", [0, -1, True, 2.5])
def test_pool_size_must_be_a_positive_integer(size: Any) -> None:
    with pytest.raises(InvalidArgument, match="open conversations must be a positive integer"):
        StorePool(size)


def test_a_slot_runs_its_work_on_one_thread() -> None:
    pool = StorePool(2)

    async def go() -> set[int]:
        idents = set()
        for _ in range(5):
            async with pool.hold("x") as slot:
                idents.add(await slot.run(threading.get_ident))
        return idents

    assert len(asyncio.run(go())) == 1
    pool.close()


_TEXTS = st.sampled_from(["hi", "run the tests", "sk-test-KEYabcdefghijklmnop", "key sk-test-KEYabcdefgh here", "done"])
_MESSAGES = st.builds(
    lambda role, text: Message(role, ({"type": "text", "text": text},)),
    st.sampled_from(["user", "assistant"]),
    _TEXTS,
)


@settings(max_examples=100, deadline=None)
@given(
    histories=st.lists(st.lists(_MESSAGES, max_size=8), min_size=1, max_size=6),
    keys=st.lists(st.sampled_from([(), ("sk-test-KEYabcdefghijklmnop",), ("other-secret-value-123",)]), min_size=6,
                  max_size=6),
)
def test_incoming_memo_equals_scrubbing_and_hashing_everything(
    histories: list[list[Message]], keys: list[tuple[str, ...]]
) -> None:
    """Request after request (growing, rewritten, other credentials), the memo's answer is the full one."""
    memo = IncomingMemo()
    grown: list[Message] = []
    for index, (extra, key) in enumerate(zip(histories, keys, strict=False)):
        grown = (grown[: len(grown) // 2] if index % 3 == 2 else grown) + extra  # sometimes a rewrite
        # a fresh parse each request: equal messages, new objects
        incoming = [Message(m.role, tuple(dict(b) for b in m.content)) for m in grown]
        scrubbed, exact = memo.prepare(incoming, key)
        assert scrubbed == scrub_messages(incoming, key)
        assert exact == [_exact(m) for m in scrub_messages(incoming, key)]
        if key == ("sk-test-KEYabcdefghijklmnop",):  # the credential never reaches the store
            assert all("KEYabcdefgh" not in json.dumps(list(m.content)) for m in scrubbed)


def test_incoming_memo_scrubs_only_what_is_new() -> None:
    memo = IncomingMemo()
    history = [Message("user", ({"type": "text", "text": f"ask {n}"},)) for n in range(50)]
    memo.prepare(history, ["sk-secret-abcdefghijkl"])
    assert memo.computed == 50
    again = [Message(m.role, tuple(dict(b) for b in m.content)) for m in history]
    memo.prepare(again + [Message("user", ({"type": "text", "text": "new"},))], ["sk-secret-abcdefghijkl"])
    assert memo.computed == 1
    memo.prepare(again, ["another-key-0123456789"])  # other credentials: everything again
    assert memo.computed == 50


def test_serve_command_passes_the_request_cap_and_open_conversations(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from compaction.cli import main
    from compaction.serve import _run

    seen: dict[str, Any] = {}
    monkeypatch.setattr(_run, "run_server", lambda **kwargs: seen.update(kwargs))
    result = CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9/v1", "--max-request-mb", "128",
                                       "--open-conversations", "3"])
    assert result.exit_code == 0, result.output
    assert seen["max_request_bytes"] == 128 * 1024 * 1024 and seen["open_conversations"] == 3
    seen.clear()
    assert CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9/v1"]).exit_code == 0
    assert seen["max_request_bytes"] == 64 * 1024 * 1024 and seen["open_conversations"] == 64  # the defaults
    refused = CliRunner().invoke(main, ["serve", "--upstream", "http://127.0.0.1:9/v1", "--open-conversations", "0"])
    assert refused.exit_code == 2 and "--open-conversations" in refused.output


@pytest.mark.parametrize(
    "option,value,needle",
    [
        ("max_request_bytes", 0, "--max-request-mb must be a positive size; found 0 bytes"),
        ("open_conversations", 0, "--open-conversations must be a positive integer; found 0"),
    ],
)
def test_run_server_refuses_bad_bounds(tmp_path: Path, option: str, value: int, needle: str) -> None:
    from compaction.serve._run import run_server

    with pytest.raises(InvalidArgument) as caught:
        run_server(upstream="http://127.0.0.1:9/v1", store_dir=tmp_path, **{option: value})
    assert str(caught.value) == needle


def test_a_slot_with_work_left_running_is_not_evicted() -> None:
    """A client that hung up leaves its call running; its slot (thread, stores) stays until it ends."""
    pool = StorePool(1)
    release = threading.Event()

    async def go() -> None:
        async def hung_up() -> None:
            async with pool.hold("a") as slot:
                await slot.run(release.wait, 10)

        task = asyncio.create_task(hung_up())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        slot_a = pool._slots["a"]
        assert slot_a.users == 0 and slot_a.pending == 1
        async with pool.hold("b"):
            pass
        assert list(pool._slots) == ["a"] and pool.evicted == 1  # a's call still runs: idle b went
        release.set()
        while slot_a.pending:
            await asyncio.sleep(0.01)
        async with pool.hold("c"):
            pass
        assert list(pool._slots) == ["c"] and pool.evicted == 2

    asyncio.run(go())
    pool.close()
