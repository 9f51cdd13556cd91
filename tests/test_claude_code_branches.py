"""Claude Code rewinds and sidechains import as branches (``compaction import --branches``).

Real samples (tests/data/claude_code, from daaain/claude-code-log, MIT): a session rewound
once and compacted after (``dag_compact_after_rewind``), and a sub-agent's sidechain written
inline (``sidechain_integrated``), whose first event continues nothing.  Built here: a
sidechain that continues a main-chain event, and pi leaves whose ids are no valid name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from store_backends import every_backend_location  # noqa: F401  (the location fixture over every backend)

from compaction import Recipe, compile_request
from compaction.branch_import import branch_name, import_branches
from compaction.cli import main
from compaction.errors import StoreError
from compaction.formats import load_transcript
from compaction.formats._claude_code_tree import session_tree
from compaction.store import list_conversations, open_store
from compaction.store.lineage import check_conversation_name

DATA = Path(__file__).parent / "data" / "claude_code"
REWOUND = DATA / "claude-code-log__dag_compact_after_rewind.jsonl"
SIDECHAIN = DATA / "claude-code-log__sidechain_integrated.jsonl"
STRUCTURAL = DATA / "spotter__tool_heavy.jsonl"
EXAMPLES = sorted((Path(__file__).parent.parent / "examples" / "claude-code").glob("*.jsonl"))


def _import(path: Path, store: Path | str, *extra: str) -> dict:
    done = CliRunner().invoke(
        main, ["import", str(path), "--store", str(store), "--branches", "--json", *extra]
    )
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def _texts(store: Path | str, name: str) -> list[str]:
    with open_store(str(store), conversation=name) as opened:
        return [m.text() for m in opened.messages()]


def test_a_rewind_is_a_branch_forked_where_the_user_went_back(location: str) -> None:
    store = location  # an SQLite file or a PostgreSQL store
    report = _import(REWOUND, store)
    assert (report["conversation"], report["messages"], report["added"]) == (
        "claude-code-log__dag_compact_after_rewind",
        8,
        8,
    )
    main_name = report["conversation"]
    assert report["branches"] == [
        {
            "name": f"{main_name}@b1u",
            "parent": main_name,
            "fork_seq": 2,
            "messages": 4,
            "added": 2,
            "kind": "rewind",
            "note": "",
        }
    ]
    # the main conversation leaves the abandoned attempt out instead of flattening it in
    assert _texts(store, main_name) == [
        "Start",
        "Ready",
        "Second attempt",
        "Second answer",
        "Keep going",
        "Kept going",
        "After compaction",
        "Final answer",
    ]
    assert _texts(store, f"{main_name}@b1u") == ["Start", "Ready", "First attempt", "First answer"]
    with open_store(str(store), conversation=main_name) as opened:
        assert (
            int(opened._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]) == 10
        )  # 8 + 2: none twice
        # Claude Code's own summary (after the compact boundary, reached by logicalParentUuid) stays in meta
        assert opened.messages()[6].meta["claude_code_compaction"]["trigger"] == "auto"
    for name, count in ((main_name, 8), (f"{main_name}@b1u", 4)):
        with open_store(str(store), conversation=name) as opened:
            request = compile_request(opened, Recipe(budget_tokens=4000))
            assert request.total_messages == count
    again = _import(REWOUND, store)
    assert again["added"] == 0 and [b["added"] for b in again["branches"]] == [0]
    assert len(list_conversations(str(store))) == 2


def test_a_sidechain_that_shares_no_history_is_a_conversation_of_its_own_and_says_why(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    report = _import(SIDECHAIN, store)
    main_name = report["conversation"]
    assert report["messages"] == 3
    [side] = report["branches"]
    assert side["name"] == f"{main_name}@sidechain-b674eedd-0d9d-49e7-8116-1f092cd750ed"
    assert (side["parent"], side["fork_seq"], side["messages"], side["added"], side["kind"]) == (
        None,
        None,
        2,
        2,
        "sidechain",
    )
    assert "continues no event of the main chain" in side["note"] and "line 2" in side["note"]
    assert "agent e1c84ba5" in side["note"]
    with open_store(str(store), conversation=side["name"]) as opened:
        messages = opened.messages()
        assert [m.role for m in messages] == ["assistant", "user"]
        assert [b["type"] for b in messages[0].content] == ["text", "tool_use"]  # one response, two lines
    listed = {c.name: c.parent for c in list_conversations(str(store))}
    assert listed == {main_name: None, side["name"]: None}
    text = CliRunner().invoke(main, ["import", str(SIDECHAIN), "--store", str(store), "--branches"])
    assert "a conversation of its own, 2 messages, 0 added" in text.output
    assert "(sub-agent sidechain (agent e1c84ba5)" in text.output


def _event(uuid: str, parent: str | None, kind: str, content: object, *, sidechain: bool = False) -> str:
    return json.dumps(
        {
            "type": kind,
            "uuid": uuid,
            "parentUuid": parent,
            "isSidechain": sidechain,
            "sessionId": "s",
            "message": {"role": kind, "content": content},
        }
    )


def test_a_sidechain_continuing_a_main_event_is_a_branch_forked_there(tmp_path: Path) -> None:
    task = [{"type": "tool_use", "id": "t1", "name": "Task", "input": {"prompt": "look"}}]
    lines = [
        _event("u1", None, "user", "find the bug"),
        _event("a1", "u1", "assistant", task),
        _event("s1", "a1", "user", "look for the bug", sidechain=True),
        _event("s2", "s1", "assistant", "it is in parse()", sidechain=True),
        _event("r1", "a1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "in parse()"}]),
        _event("a2", "r1", "assistant", "fixed parse()"),
    ]
    path = tmp_path / "task.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tree = session_tree(path.read_text())
    [thread] = tree.threads
    assert (thread.kind, thread.start, thread.lines, thread.shares_history) == (
        "sidechain",
        "s1",
        (0, 1, 2, 3),
        True,
    )
    store = tmp_path / "s.db"
    report = _import(path, store)
    assert report["messages"] == 4
    assert report["branches"] == [
        {
            "name": "task@sidechain-s1",
            "parent": "task",
            "fork_seq": 2,
            "messages": 4,
            "added": 2,
            "kind": "sidechain",
            "note": "",
        }
    ]
    assert _texts(store, "task@sidechain-s1")[2:] == ["look for the bug", "it is in parse()"]
    with open_store(str(store), conversation="task@sidechain-s1") as opened:
        assert compile_request(opened, Recipe(budget_tokens=4000)).total_messages == 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_a_session_without_rewinds_imports_the_same_main_conversation_with_branches(
    path: Path, tmp_path: Path
) -> None:
    plain = load_transcript(path, lenient=True)
    report = _import(path, tmp_path / "s.db", "--lenient")
    assert report["branches"] == []
    assert _texts(tmp_path / "s.db", report["conversation"]) == [m.text() for m in plain.messages]


def test_forks_that_are_not_rewinds_stay_in_the_conversation(tmp_path: Path) -> None:
    """Real sessions fork every few events (parallel tool calls answered each to its own call, hook
    progress events): none is a rewind, so --branches imports the same conversation and no branch."""
    text = STRUCTURAL.read_text()
    children: dict[str, int] = {}
    for line in text.splitlines():
        event = json.loads(line)
        if isinstance(event.get("parentUuid"), str):
            children[event["parentUuid"]] = children.get(event["parentUuid"], 0) + 1
    assert sum(1 for count in children.values() if count >= 2) == 5
    tree = session_tree(text)
    assert (tree.abandoned, tree.threads, len(tree.main)) == (0, (), len(text.splitlines()))
    plain = load_transcript(STRUCTURAL)
    report = _import(STRUCTURAL, tmp_path / "s.db")
    assert report["branches"] == [] and report["added"] == len(plain.messages) == 15
    assert not any("rewind" in p for p in plain.problems)  # no false rewind note either


def test_a_rewound_branch_keeps_its_parallel_tool_calls(tmp_path: Path) -> None:
    calls = [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"path": f"f{i}"}} for i in (1, 2)]

    def result(uuid: str, parent: str, call: str) -> str:
        content = [{"type": "tool_result", "tool_use_id": call, "content": f"text of {call}"}]
        return _event(uuid, parent, "user", content)

    lines = [
        _event("u1", None, "user", "read both files"),
        _event("a1", "u1", "assistant", [calls[0]]),
        _event("a2", "a1", "assistant", [calls[1]]),  # one response, a block a line
        result("r2", "a2", "t2"),
        result("r1", "a1", "t1"),  # each answer names its own call: a fork, not a rewind
        _event("a3", "r1", "assistant", "both read"),
        _event("u2", "a3", "user", "now delete them"),  # abandoned: the user went back to a3
        _event("a4", "u2", "assistant", "deleted"),
        _event("u3", "a3", "user", "now summarize them"),
        _event("a5", "u3", "assistant", "a summary"),
    ]
    for index, line in enumerate(lines):  # give each assistant line its response's id
        event = json.loads(line)
        if event["uuid"] in ("a1", "a2"):
            event["message"]["id"] = "msg_1"
        lines[index] = json.dumps(event)
    path = tmp_path / "par.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tree = session_tree(path.read_text())
    assert [(t.kind, t.start, t.lines) for t in tree.threads] == [("rewind", "u2", (0, 1, 2, 3, 4, 5, 6, 7))]
    store = tmp_path / "s.db"
    report = _import(path, store)
    assert _texts(store, "par")[-2:] == ["now summarize them", "a summary"]
    assert report["branches"][0]["name"] == "par@u2" and report["branches"][0]["fork_seq"] == 4
    with open_store(str(store), conversation="par@u2") as branch:
        shown = branch.messages()
        assert [m.text() for m in shown[-2:]] == ["now delete them", "deleted"]
        assert [b["id"] for b in shown[1].content] == ["t1", "t2"]  # the parallel calls, joined
        assert sorted(b["tool_use_id"] for b in shown[2].content) == ["t1", "t2"]  # both answers
        compile_request(branch, Recipe(budget_tokens=4000))


def test_a_rewind_behind_hook_progress_events_is_found(tmp_path: Path) -> None:
    """Newer versions write a prompt's hook progress events before it, so the fork is at the event
    both hook chains continue, not at the prompts' own parents."""

    def hook(uuid: str, parent: str) -> str:
        data = {"type": "hook_progress", "hookEvent": "UserPromptSubmit"}
        return json.dumps(
            {"type": "progress", "uuid": uuid, "parentUuid": parent, "sessionId": "s", "data": data}
        )

    lines = [
        _event("u1", None, "user", "list the files"),
        _event("a1", "u1", "assistant", "three files"),
        hook("h1", "a1"),
        _event("u2", "h1", "user", "delete them"),
        _event("a2", "u2", "assistant", "deleted"),
        hook("h2", "a1"),  # the user went back to a1
        hook("h3", "h2"),
        _event("u3", "h3", "user", "summarize them"),
        _event("a3", "u3", "assistant", "a summary"),
    ]
    path = tmp_path / "hooks.jsonl"
    path.write_text("\n".join(lines) + "\n")
    tree = session_tree(path.read_text())
    assert [(t.kind, t.start, t.lines) for t in tree.threads] == [("rewind", "u2", (0, 1, 2, 3, 4))]
    assert tree.main == (0, 1, 5, 6, 7, 8)
    store = tmp_path / "s.db"
    report = _import(path, store)
    assert _texts(store, "hooks") == ["list the files", "three files", "summarize them", "a summary"]
    assert [(b["name"], b["fork_seq"]) for b in report["branches"]] == [("hooks@u2", 2)]
    assert _texts(store, "hooks@u2") == ["list the files", "three files", "delete them", "deleted"]


def test_a_subagent_carried_by_progress_events_is_a_conversation_of_its_own(tmp_path: Path) -> None:
    """Newer versions carry each message of a sub-agent in a progress event under the Task call
    (``data.message``, the shape of Claude Code 2.1 sessions such as marot/spotter's fixtures)."""
    task = [{"type": "tool_use", "id": "toolu_9", "name": "Task", "input": {"prompt": "count the files"}}]

    def carried(uuid: str, parent: str, kind: str, content: object) -> str:
        inner = {
            "type": kind,
            "uuid": f"sub-{uuid}",
            "timestamp": "t",
            "message": {"role": kind, "content": content},
        }
        data = {"type": "agent_progress", "agentId": "a77", "prompt": "count the files", "message": inner}
        event = {
            "type": "progress",
            "uuid": uuid,
            "parentUuid": parent,
            "isSidechain": False,
            "sessionId": "s",
        }
        return json.dumps({**event, "data": data, "parentToolUseID": "toolu_9", "toolUseID": "agent_msg_1"})

    answer = [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "12 files"}]
    lines = [
        _event("u1", None, "user", "how many files?"),
        _event("a1", "u1", "assistant", task),
        carried("p1", "a1", "user", "count the files"),
        carried("p2", "p1", "assistant", [{"type": "text", "text": "there are 12"}]),
        _event("r1", "a1", "user", answer),
        _event("a2", "r1", "assistant", "12 files"),
    ]
    path = tmp_path / "agents.jsonl"
    path.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.db"
    report = _import(path, store)
    assert report["messages"] == 4
    [side] = report["branches"]
    assert (side["name"], side["parent"], side["messages"], side["kind"]) == (
        "agents@sidechain-agent-a77",
        None,
        2,
        "sidechain",
    )
    assert side["note"] == (
        "sub-agent (agent a77) whose messages 2 progress events carry (lines 3 to 4): a sub-agent starts from a "
        "fresh context, so it shares no history with 'agents' and is a conversation of its own named after it; "
        "it answers the Task call whose result is line 5"
    )
    assert _texts(store, side["name"]) == ["count the files", "there are 12"]
    assert [b["added"] for b in _import(path, store)["branches"]] == [0]


def test_a_flattened_import_is_kept_and_the_active_path_becomes_a_branch(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    flat = CliRunner().invoke(main, ["import", str(REWOUND), "--store", str(store), "--json"])
    assert json.loads(flat.stdout)["added"] == 10  # both attempts, in file order
    report = _import(REWOUND, store)
    assert report["added"] == 0
    assert report["branch_notes"] == [
        "conversation 'claude-code-log__dag_compact_after_rewind' holds messages this session's main conversation does "
        "not start with (imported before without --branches, or the session was rewound since): nothing is appended "
        "to it; the main conversation's 8 messages import as a branch of it"
    ]
    main_name = report["conversation"]
    assert [(b["name"], b["fork_seq"], b["added"]) for b in report["branches"]] == [
        (f"{main_name}@active-p1a", 2, 6)  # the abandoned attempt is the flattened conversation's own prefix
    ]
    assert _texts(store, f"{main_name}@active-p1a")[2:4] == ["Second attempt", "Second answer"]


def test_branches_on_a_format_without_branches_says_so(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
    )
    done = CliRunner().invoke(main, ["import", str(path), "--store", str(tmp_path / "s.db"), "--branches"])
    assert done.exit_code == 0, done.output
    assert (
        "--branches: a openai transcript holds no branches (only pi session trees and Claude Code rewinds and "
        "sidechains do); it was imported as one conversation"
    ) in done.stderr


def _pi(name: str, parent: str | None, role: str, text: str) -> str:
    message = {"role": role, "content": [{"type": "text", "text": text}]}
    return json.dumps(
        {"type": "message", "id": name, "parentId": parent, "timestamp": "t", "message": message}
    )


@pytest.mark.parametrize("leaf", ["line\nbreak", "x" * 300, "tab\there\x00nul"])
def test_a_pi_leaf_id_that_is_no_valid_name_still_imports(leaf: str, tmp_path: Path) -> None:
    lines = [
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"}),
        _pi("e0", None, "user", "fix it"),
        _pi(leaf, "e0", "assistant", "abandoned answer"),
        _pi("e1", "e0", "assistant", "kept answer"),
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.db"
    report = _import(path, store)
    [branch] = report["branches"]
    assert branch["name"] == branch_name("tree", leaf)
    check_conversation_name(branch["name"])
    assert _texts(store, branch["name"]) == ["fix it", "abandoned answer"]
    assert [b["added"] for b in _import(path, store)["branches"]] == [0]


@given(st.text(min_size=1, max_size=200).filter(str.strip), st.text(max_size=400), st.text(max_size=400))
def test_branch_names_are_valid_stable_and_apart(conversation: str, tag: str, other: str) -> None:
    try:
        check_conversation_name(conversation)
    except Exception:
        return  # only valid conversation names have branches
    name = branch_name(conversation, tag)
    assert check_conversation_name(name) == name
    assert branch_name(conversation, tag) == name
    if other != tag:
        assert branch_name(conversation, other) != name
    if len(f"{conversation}@{tag}") <= 200 and all(c.isprintable() or c == " " for c in tag):
        assert name == f"{conversation}@{tag}"


def test_a_failure_mid_way_says_what_was_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from compaction import branch_import

    lines = [
        json.dumps({"type": "session", "version": 3, "id": "s", "cwd": "/w"}),
        _pi("e0", None, "user", "fix it"),
        _pi("b1", "e0", "assistant", "first"),
        _pi("b2", "e0", "assistant", "second"),
        _pi("e1", "e0", "assistant", "kept"),
    ]
    path = tmp_path / "tree.jsonl"
    path.write_text("\n".join(lines) + "\n")
    store = tmp_path / "s.db"
    CliRunner().invoke(main, ["import", str(path), "--store", str(store)])
    real = branch_import._store_path
    calls = []

    def failing(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise StoreError("the disk is full")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(branch_import, "_store_path", failing)
    with pytest.raises(StoreError) as caught:
        import_branches(str(store), path, "tree", "pi")
    assert str(caught.value) == (
        "the disk is full [the import stopped there: conversation 'tree' is stored, and of its branches "
        "'tree@b1' (1 added); importing again adds only what is missing]"
    )
    monkeypatch.setattr(branch_import, "_store_path", real)
    made, _notes = import_branches(str(store), path, "tree", "pi")
    assert [(b.name, b.added) for b in made] == [("tree@b1", 0), ("tree@b2", 1)]


def test_a_sidechain_of_events_that_are_no_messages_adds_nothing_and_does_not_fail(tmp_path: Path) -> None:
    system = {
        "type": "system",
        "uuid": "s1",
        "parentUuid": None,
        "isSidechain": True,
        "content": "agent started",
    }
    lines = [_event("u1", None, "user", "hi"), json.dumps(system), _event("a1", "u1", "assistant", "hello")]
    path = tmp_path / "quiet.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert [t.start for t in session_tree(path.read_text()).threads] == ["s1"]
    report = _import(path, tmp_path / "s.db")
    assert (report["added"], report["branches"]) == (2, [])
