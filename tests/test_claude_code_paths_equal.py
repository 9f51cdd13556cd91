"""Property: ``import --branches`` of a Claude Code session, which reads each event once (the
paths of the session's tree resume from each other's parse, :mod:`compaction.formats._claude_code_paths`),
stores exactly what the path-by-path import stored: each rewind's and sidechain's path parsed
whole from its own text (``path_lines`` and the parser), as it was before.

The reference is the same import with :func:`~compaction.formats._claude_code_paths.thread_messages`
answering "parse it whole" for every thread (the fallback, which is the old per-path parse).
Sessions are random trees of events as Claude Code writes them: prompts, answers, answers
split one block a line under one message id (also across a rewind), parallel tool calls and
their results, reused tool ids, hook ``progress`` events, compact boundaries and summaries,
sidechains (from a fresh context or continuing an event), repeated uuids, and malformed lines
(read in lenient mode; in strict mode both imports must fail with the same error), plus the
shapes of ``rewind_tree`` and ``nested_rewinds``.  Compared: the import's JSON report
(conversations, branches, notes, counts), and every conversation of the store: its parent,
fork point and the messages it shows (role, content blocks, source id, meta).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from claude_code_sessions import nested_rewinds, rewind_tree, session_text
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.branch_import as branch_import
from compaction.cli import main
from compaction.formats._claude_code_paths import ThreadParse, thread_messages
from compaction.formats._claude_code_tree import session_tree
from compaction.store import list_conversations, open_store


def _event(uuid: str, parent: str | None, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if "message_id" in extra:
        message["id"] = extra.pop("message_id")
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": extra.pop("sidechain", False),
        "sessionId": "s",
        "timestamp": "2025-07-01T10:00:00.000Z",
        "message": message,
        **extra,
    }


MALFORMED = [
    "{not json",
    "[1, 2]",
    json.dumps({"type": "user", "uuid": "bad-no-message", "parentUuid": None}),
    json.dumps({"uuid": "bad-no-type", "parentUuid": None, "message": {"role": "user", "content": "x"}}),
]


@st.composite
def session_lines(draw: Any) -> list[str]:
    """The lines of a random Claude Code session (a tree of events, some lines malformed)."""
    lines: list[str] = []
    main: list[str] = []  # uuids of main-chain events so far
    side: list[str] = []
    assistant_ids: list[str] = []
    tool_ids: list[str] = []
    for n in range(draw(st.integers(min_value=1, max_value=24))):
        uuid = f"e{n}"
        back = draw(st.integers(min_value=0, max_value=3)) if main else 0
        parent = main[-1 - min(back, len(main) - 1)] if main else None
        kind = draw(
            st.sampled_from(
                [
                    "prompt",
                    "prompt",
                    "answer",
                    "answer",
                    "split",
                    "calls",
                    "results",
                    "hook",
                    "boundary",
                    "summary",
                    "side",
                    "repeat",
                    "malformed",
                    "empty",
                    "badblock",
                ]
            )
        )
        if kind == "prompt":
            event = _event(uuid, parent, "user", f"ask {n}")
        elif kind == "answer":
            message_id = f"m{n}"
            assistant_ids.append(message_id)
            event = _event(
                uuid, parent, "assistant", [{"type": "text", "text": f"answer {n}"}], message_id=message_id
            )
        elif kind == "split" and assistant_ids:  # one more block of an earlier answer, one line a block
            message_id = draw(st.sampled_from(assistant_ids))
            block = draw(
                st.sampled_from(
                    [
                        {"type": "text", "text": f"more {n}"},
                        {"type": "text", "text": "answer 0"},
                        {"type": "tool_use", "id": "t0", "name": "Bash", "input": {"n": n}},
                    ]
                )
            )
            event = _event(uuid, parent, "assistant", [block], message_id=message_id)
        elif kind == "calls":
            ids = draw(st.lists(st.sampled_from(["t0", "t1", "t0_2", "t2"]), min_size=1, max_size=2))
            tool_ids.extend(ids)
            blocks = [{"type": "tool_use", "id": i, "name": "Bash", "input": {"n": n}} for i in ids]
            event = _event(uuid, parent, "assistant", blocks, message_id=f"m{n}")
        elif kind == "results" and tool_ids:
            answered = draw(st.sampled_from(tool_ids))
            event = _event(
                uuid,
                parent,
                "user",
                [{"type": "tool_result", "tool_use_id": answered, "content": f"out {n}"}],
            )
        elif kind == "hook":
            event = {
                "type": "progress",
                "uuid": uuid,
                "parentUuid": parent,
                "data": {"type": "hook_progress"},
            }
        elif kind == "boundary":
            event = {
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": uuid,
                "parentUuid": None,
                "logicalParentUuid": parent,
                "compactMetadata": {"trigger": "auto", "preTokens": 1000 + n},
            }
        elif kind == "summary":
            event = _event(
                uuid,
                parent,
                "user",
                "This session is being continued from a previous conversation. It was about x.",
                isCompactSummary=True,
            )
        elif kind == "side":
            side_parent = draw(st.sampled_from([None, parent, *(side[-1:])]))
            kind_side = draw(st.sampled_from(["user", "assistant"]))
            content: Any = f"agent {n}" if kind_side == "user" else [{"type": "text", "text": f"agent {n}"}]
            event = _event(uuid, side_parent, kind_side, content, sidechain=True, agentId="ag1")
            side.append(uuid)
            lines.append(json.dumps(event))
            continue
        elif kind == "repeat" and main:  # a resumed session repeats an event (same uuid)
            lines.append(lines[draw(st.integers(min_value=0, max_value=len(lines) - 1))])
            continue
        elif kind == "malformed":
            lines.append(draw(st.sampled_from(MALFORMED)))
            continue
        elif kind == "empty":
            event = _event(uuid, parent, "assistant", [], message_id=f"m{n}")
        elif kind == "badblock":
            event = _event(uuid, parent, "user", [{"type": "image", "source": {"type": "base64"}}])
        else:
            event = _event(uuid, parent, "user", f"ask {n}")
        main.append(uuid)
        lines.append(json.dumps(event))
    return lines


def _all_whole(text: str, tree: Any, name: str, lenient: bool) -> list[ThreadParse]:
    """The reference: every thread parsed whole from its own text, as before."""
    return [ThreadParse(True, None) for _thread in tree.threads]


def _store_view(store_path: Path) -> list[dict[str, Any]]:
    """Every conversation of the store: name, parent, fork seq, and the messages it shows."""
    if not store_path.exists():
        return []
    out = []
    for info in list_conversations(store_path):
        with open_store(store_path, create=False, conversation=info.name) as store:
            messages = [
                (
                    m.seq,
                    m.role,
                    json.dumps(list(m.content), sort_keys=True),
                    m.source_id,
                    json.dumps(m.meta, sort_keys=True),
                )
                for m in store.messages()
            ]
        out.append(
            {"name": info.name, "parent": info.parent, "fork_seq": info.fork_seq, "messages": messages}
        )
    return out


def _import(session: Path, store: Path, lenient: bool) -> tuple[int, str, list[dict[str, Any]]]:
    args = ["import", str(session), "--store", str(store), "--json", "--branches"] + (
        ["--lenient"] if lenient else []
    )
    done = CliRunner().invoke(main, args)
    return done.exit_code, done.output.replace(str(store), "STORE"), _store_view(store)


def _both(tmp_path: Path, text: str, lenient: bool, monkeypatch: pytest.MonkeyPatch, tag: str) -> None:
    session = tmp_path / f"{tag}.jsonl"
    session.write_text(text, encoding="utf-8")
    once = _import(session, tmp_path / f"{tag}-once.db", lenient)
    with monkeypatch.context() as patched:
        patched.setattr(branch_import, "thread_messages", _all_whole)
        whole = _import(session, tmp_path / f"{tag}-whole.db", lenient)
    assert once == whole


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=session_lines(), lenient=st.booleans())
def test_random_sessions_import_as_path_by_path(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, lines: list[str], lenient: bool
) -> None:
    tmp_path = tmp_path_factory.mktemp("s")
    _both(tmp_path, "\n".join(lines) + "\n", lenient, monkeypatch, "random")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    parents=st.lists(st.integers(min_value=-1, max_value=12), min_size=1, max_size=14).map(
        lambda ps: [min(p, i - 1) for i, p in enumerate(ps)]
    ),
    nested=st.integers(min_value=0, max_value=12),
    malformed=st.lists(
        st.tuples(st.integers(min_value=0, max_value=60), st.sampled_from(MALFORMED)), max_size=3
    ),
    lenient=st.booleans(),
)
def test_rewind_shapes_import_as_path_by_path(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    parents: list[int],
    nested: int,
    malformed: list[tuple[int, str]],
    lenient: bool,
) -> None:
    tmp_path = tmp_path_factory.mktemp("r")
    for tag, events in (("tree", rewind_tree(parents)), ("nested", nested_rewinds(nested))):
        lines = session_text(events).splitlines()
        for where, bad in malformed:
            lines.insert(min(where, len(lines)), bad)
        _both(tmp_path, "\n".join(lines) + "\n", lenient, monkeypatch, tag)


def test_nested_rewinds_resume_and_share_messages(tmp_path: Path) -> None:
    """Each nested rewind resumes from the one before, and the messages they share are one object each."""
    text = session_text(nested_rewinds(6))
    tree = session_tree(text)
    parsed = thread_messages(text, tree, "n (a branch of it)", lenient=False)
    assert [t.continues for t in tree.threads] == [None, 0, 1, 2, 3, 4]
    paths = [p.messages for p in parsed]
    assert all(p is not None for p in paths)
    # x{i}'s path: the root turn, x0 .. x{i} with their answers, then y{i+1} going on in it
    assert [len(p) for p in paths if p is not None] == [6, 8, 10, 12, 14, 14]
    deepest = paths[-1]
    assert deepest is not None
    assert [m.text() for m in deepest] == [
        "root",
        "root answer",
        *[t for i in range(6) for t in (f"abandon {i}", f"aa {i}")],
    ]
    for shorter in paths[:-1]:
        assert shorter is not None
        assert [m.text() for m in shorter[-2:-1]] != [deepest[len(shorter) - 2].text()]  # y, not x
        assert all(a is b for a, b in zip(shorter[:-2], deepest, strict=False))


def _answer_chunk(uuid: str, parent: str, text: str) -> dict[str, Any]:
    """A later line of the first answer (message id ``m0``): Claude Code writes a block a line."""
    return _event(uuid, parent, "assistant", [{"type": "text", "text": text}], message_id="m0")


def test_rewinds_that_add_to_a_shared_answer_each_get_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three prompts rewound at one answer (two rewinds) and a rewind nested in the one that goes
    on, each path adding its own line to the answer before the fork (same message id): each
    branch's copy of that answer holds its own path's lines only, as its text parsed whole gives."""
    events = [
        _event("r", None, "user", "root"),
        _event("a", "r", "assistant", [{"type": "text", "text": "first"}], message_id="m0"),
    ]
    for i in range(3):
        events += [
            _event(f"p{i}", "a", "user", f"ask {i}"),
            _event(
                f"b{i}",
                f"p{i}",
                "assistant",
                [{"type": "text", "text": f"answer {i}"}],
                message_id=f"m{i + 1}",
            ),
            _answer_chunk(f"c{i}", f"b{i}", f"chunk {i}"),
        ]
    events += [  # nested in p0's branch, going back to its answer
        _event("q", "c0", "user", "nested ask"),
        _answer_chunk("qc", "q", "nested chunk"),
        _event("q2", "c0", "user", "nested ask again"),
    ]
    text = session_text(events)
    tree = session_tree(text)
    parsed = thread_messages(text, tree, "s (a branch of it)", lenient=False)
    firsts = {
        thread.start: [b["text"] for b in p.messages[1].content]
        for thread, p in zip(tree.threads, parsed, strict=True)
        if p.messages is not None
    }
    # p0 goes on (q2 reaches furthest); a rewind's path holds the conversation's events before
    # it in the file, p0's chunk among them
    assert firsts == {
        "p1": ["first", "chunk 0", "chunk 1"],
        "p2": ["first", "chunk 0", "chunk 2"],
        "q": ["first", "chunk 0", "nested chunk"],
    }
    _both(tmp_path, text, False, monkeypatch, "chunks")


@given(
    recorded=st.lists(
        st.tuples(st.sampled_from("abcde"), st.lists(st.sampled_from("xyz"), max_size=6)),
        min_size=1,
        max_size=8,
    ),
    base=st.integers(min_value=0, max_value=7),
    cut=st.integers(min_value=0, max_value=6),
    extra=st.lists(st.sampled_from("xyz"), max_size=4),
    other_than=st.sampled_from("abcdefg"),
)
def test_the_prefix_tree_walks_from_a_recorded_path_as_from_its_root(
    recorded: list[tuple[str, list[str]]], base: int, cut: int, extra: list[str], other_than: str
) -> None:
    """A branch's walks in the stored-paths trie start where it leaves the path it continues
    (the node of that path's first ``cut`` messages, found walking up from its end): they
    answer what walking the branch's whole path from the root answers."""

    def record() -> tuple[Any, dict[str, list[str]], dict[str, Any]]:
        tree = branch_import._PrefixTree("claude-code")
        held: dict[str, list[str]] = {}
        leaves: dict[str, Any] = {}
        for name, path in recorded:
            if name in held and path[: len(held[name])] != held[name]:
                continue  # a conversation's messages only grow: a later record extends the earlier
            leaves[name] = tree.add(name, path)
            held[name] = path
        return tree, held, leaves

    tree, held, leaves = record()
    name = sorted(held)[base % len(held)]
    shared = min(cut, len(held[name]))
    start = leaves[name]
    while start.depth > shared:
        start = start.parent
    prints = held[name][:shared] + extra
    assert tree.longest(prints, other_than, start) == tree.longest(prints, other_than)
    assert tree.covers(prints, start) == tree.covers(prints)
    for depth in range(len(prints) + 1):
        assert tree.key_at(prints, depth, start) == tree.key_at(prints, depth)
    if other_than in held and prints[: len(held[other_than])] != held[other_than]:
        return  # a conversation's messages only grow
    walked, _held, _leaves = record()  # the same records, then the branch added from the root
    tree.add(other_than, prints, start)
    walked.add(other_than, prints)
    for depth in range(len(prints) + 1):
        for other in "abcdefg?":
            assert tree.longest(prints[:depth], other) == walked.longest(prints[:depth], other)


def test_rewinds_resuming_at_one_draft_count_each_get_their_own_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two rewinds resume from the conversation at two places with the same drafts before them (a
    hook event between, which makes no message): each finishes from its own state, so the
    first one's prompt is not in the second's path (hypothesis found it: one state was shared)."""
    events = [
        _event("e0", None, "user", "ask 0"),
        _event("e1", "e0", "user", "ask 1"),
        {"type": "progress", "uuid": "e2", "parentUuid": "e0", "data": {"type": "hook_progress"}},
        _event("e3", "e2", "user", "ask 3"),
        _event("e5", "e3", "user", "ask 5"),
        _event("e7", "e2", "user", "ask 7"),
    ]
    text = session_text(events)
    tree = session_tree(text)
    parsed = thread_messages(text, tree, "s (a branch of it)", lenient=False)
    assert [[m.text() for m in p.messages or []] for p in parsed] == [
        ["ask 0", "ask 1"],
        ["ask 0", "ask 3", "ask 5"],
    ]
    _both(tmp_path, text, False, monkeypatch, "count")
