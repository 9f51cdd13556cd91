"""Hostile input against what session 11 built (attack pass): each test failed before its fix.

Claude Code sessions are built here (events with ``uuid`` / ``parentUuid``), so each shows
one hostile shape: rewinds nested deeper than Python's recursion limit, a prompt whose uuid
reads like a sidechain's branch name, a store already holding a conversation named like a
branch the import would make.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from claude_code_sessions import assistant_event, nested_rewinds, session_text, user_event, write_session
from click.testing import CliRunner

from compaction.cli import main
from compaction.formats._claude_code_tree import session_tree
from compaction.store import list_conversations, open_store

DATA = Path(__file__).parent / "data" / "claude_code"
REWOUND = DATA / "claude-code-log__dag_compact_after_rewind.jsonl"


def _import(path: Path, store: Path, *extra: str) -> dict[str, Any]:
    done = CliRunner().invoke(
        main, ["import", str(path), "--store", str(store), "--branches", "--json", *extra]
    )
    assert done.exit_code == 0, done.output
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _texts(store: Path, name: str) -> list[str]:
    with open_store(str(store), conversation=name) as opened:
        return [m.text() for m in opened.messages()]


def _rewound_beside_a_sidechain(path: Path, abandoned: str) -> Path:
    """Write a session whose prompt ``abandoned`` (answered ``x``) is rewound for ``keep``
    (answered ``k``), then a sidechain ``S`` of a prompt and its answer (lines 7 and 8)."""
    return write_session(
        path,
        [
            user_event("r", None, "root"),
            assistant_event("ra", "r", "ans"),
            user_event(abandoned, "ra", "abandoned"),
            assistant_event("x1", abandoned, "x"),
            user_event("keep", "ra", "keep"),
            assistant_event("k1", "keep", "k"),
            user_event("S", None, "sub task", sidechain=True),
            assistant_event("S2", "S", "sub answer", sidechain=True),
        ],
    )


def test_rewinds_nested_deeper_than_the_recursion_limit_are_read() -> None:
    # each rewind forks inside the one before (the abandoned prompt x_i is the parent of the
    # next fork); the kept prompts' answers come last, newest first, so each y_i reaches furthest
    depth = sys.getrecursionlimit() + 100
    text = session_text(nested_rewinds(depth, root_answer="ans"))
    tree = session_tree(text)
    assert len(tree.threads) == depth
    assert [t.start for t in tree.threads[:3]] == ["x0", "x1", "x2"]
    deepest = tree.threads[-1]
    # the deepest rewind holds root, answer, and every abandoned prompt and answer above it
    assert deepest.lines[:2] == (0, 1)
    assert len(deepest.lines) == 2 + 2 * depth
    # the conversation goes on with y0 (its answer is the last line); everything else is rewound
    assert tree.main == (0, 1, 4, 4 * depth + 1)
    assert tree.abandoned == 4 * depth - 2


def test_a_prompt_uuid_reading_like_a_sidechain_name_does_not_merge_two_paths(tmp_path: Path) -> None:
    session = _rewound_beside_a_sidechain(tmp_path / "collide.jsonl", abandoned="sidechain-S")
    store = tmp_path / "s.db"
    report = _import(session, store)
    names = [b["name"] for b in report["branches"]]
    assert names == ["collide@sidechain-S", "collide@sidechain-S~2"]
    assert _texts(store, "collide@sidechain-S") == ["root", "ans", "abandoned", "x"]
    assert _texts(store, "collide@sidechain-S~2") == ["sub task", "sub answer"]
    again = _import(session, store)
    assert [(b["name"], b["added"]) for b in again["branches"]] == [(n, 0) for n in names]


def test_a_conversation_named_like_a_branch_is_left_alone(tmp_path: Path) -> None:
    other = write_session(
        tmp_path / "other.jsonl", [user_event("o1", None, "other"), assistant_event("o2", "o1", "reply")]
    )
    store = tmp_path / "s.db"
    done = CliRunner().invoke(
        main, ["import", str(other), "--store", str(store), "--conversation", "dag@b1u"]
    )
    assert done.exit_code == 0, done.output
    report = _import(REWOUND, store, "--conversation", "dag")
    [branch] = report["branches"]
    assert (branch["name"], branch["parent"], branch["fork_seq"]) == ("dag@b1u~2", "dag", 2)
    assert "'dag@b1u' holding other messages exists" in branch["note"]
    assert _texts(store, "dag@b1u") == ["other", "reply"]
    assert _texts(store, "dag@b1u~2")[2:] == ["First attempt", "First answer"]
    again = _import(REWOUND, store, "--conversation", "dag")
    assert [(b["name"], b["added"]) for b in again["branches"]] == [("dag@b1u~2", 0)]
    assert {i.name: i.messages for i in list_conversations(str(store))} == {
        "dag@b1u": 2,
        "dag": 8,
        "dag@b1u~2": 4,
    }


def test_notes_of_a_reparsed_main_conversation_name_the_users_file(tmp_path: Path) -> None:
    session = _rewound_beside_a_sidechain(tmp_path / "notes.jsonl", abandoned="p1")
    report = _import(session, tmp_path / "s.db")
    notes = " ".join(report.get("notes", []) + report.get("problems", []))
    assert f"{session}:7" in notes or "notes.jsonl:7" in notes, report
    assert "/tmp/notes." not in notes.replace(str(session), "")


def _pi_entry(id_: object, parent: object, role: str, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": id_,
        "parentId": parent,
        "timestamp": "2025-12-08T22:41:05.306Z",
        "message": {"role": role, "content": [{"type": "text", "text": text}]},
    }


def test_pi_entries_on_no_path_are_named_not_dropped_silently(tmp_path: Path) -> None:
    session = tmp_path / "pi_tree.jsonl"
    entries = [
        {"type": "session", "id": "s", "timestamp": "2025-12-09T00:53:29.825Z", "cwd": "/"},
        _pi_entry("r", None, "user", "root"),
        _pi_entry("ra", "r", "assistant", "ans"),
        _pi_entry("a\nb", "ra", "user", "leaf"),
        _pi_entry("c1", "c2", "user", "cycle one"),  # line 5
        _pi_entry("c2", "c1", "user", "cycle two"),  # line 6
        _pi_entry("self", "self", "user", "own parent"),  # line 7
        _pi_entry(5, "ra", "user", "number id"),  # line 8
        _pi_entry("last", "ra", "user", "final"),
    ]
    write_session(session, entries)
    store = tmp_path / "pi.db"
    done = CliRunner().invoke(
        main, ["import", str(session), "--store", str(store), "--branches", "--format", "pi", "--json"]
    )
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert [b["added"] for b in report["branches"]] == [1]
    [lost] = [n for n in report["branch_notes"] if "lie on no path" in n]
    assert lost.startswith(f"{session}: 4 message entries")
    assert "lines 5, 6, 7, 8)" in lost


def _progress(uuid: str, parent: str, carried: dict[str, Any], agent: str) -> dict[str, Any]:
    return {
        "type": "progress",
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": False,
        "parentToolUseID": "toolu_1",
        "data": {"type": "agent_progress", "agentId": agent, "message": carried},
    }


def _carried_session(path: Path) -> Path:
    return write_session(
        path,
        [
            user_event("a", None, "hi"),
            assistant_event("b", "a", "yo"),
            _progress("p1", "b", {"type": "user", "message": {"role": "user", "content": "sub q"}}, "ag1"),
            # a sub-agent message whose content is an object: the sub-agent's branch cannot be parsed
            _progress(
                "p2",
                "p1",
                {"type": "assistant", "message": {"role": "assistant", "content": {"x": 1}}},
                "ag1",
            ),
            # a sub-agent holding only a malformed message (a 'system' role in a user event)
            _progress("p3", "p2", {"type": "user", "message": {"role": "system", "content": "s"}}, "ag\n2"),
            user_event("c", "b", "more"),
            assistant_event("d", "c", "ok"),
        ],
    )


def test_a_branch_that_cannot_be_parsed_fails_the_import_before_anything_is_stored(tmp_path: Path) -> None:
    session = _carried_session(tmp_path / "carried.jsonl")
    store = tmp_path / "s.db"
    other = write_session(
        tmp_path / "other.jsonl", [user_event("o1", None, "other"), assistant_event("o2", "o1", "reply")]
    )
    assert CliRunner().invoke(main, ["import", str(other), "--store", str(store)]).exit_code == 0
    before = [(i.name, i.messages) for i in list_conversations(str(store))]
    done = CliRunner().invoke(main, ["import", str(session), "--store", str(store), "--branches"])
    assert done.exit_code == 1
    assert (
        "carried.jsonl (a branch of it):4: content must be a string or a list of parts, found dict"
        in done.output
    )
    assert [(i.name, i.messages) for i in list_conversations(str(store))] == before == [("other", 2)]


def test_lenient_skips_a_branch_with_nothing_parseable_and_says_so_on_one_line(tmp_path: Path) -> None:
    session = _carried_session(tmp_path / "carried.jsonl")
    store = tmp_path / "s.db"
    report = _import(session, store, "--lenient")
    assert (report["messages"], report["added"]) == (4, 4)
    assert [(b["name"], b["messages"]) for b in report["branches"]] == [("carried@sidechain-agent-ag1", 1)]
    [skipped] = [n for n in report["branch_notes"] if n.startswith("--lenient")]
    assert "'agent-ag\\n2' is skipped" in skipped
    assert "\n" not in skipped


def test_an_over_budget_compile_names_a_pinned_user_message_as_pinned_not_as_system(tmp_path: Path) -> None:
    transcript = tmp_path / "t.json"
    turns: list[dict[str, str]] = [{"role": "system", "content": "sys"}]
    for i in range(30):
        turns.append({"role": "user", "content": f"question {i} " + ("word " * (1500 if i == 3 else 20))})
        turns.append({"role": "assistant", "content": f"answer {i}"})
    transcript.write_text(json.dumps({"messages": turns}), encoding="utf-8")
    store = tmp_path / "s.db"
    runner = CliRunner()
    assert runner.invoke(main, ["import", str(transcript), "--store", str(store)]).exit_code == 0
    assert runner.invoke(main, ["pin", "7", "--store", str(store)]).exit_code == 0
    done = runner.invoke(main, ["compress", "--store", str(store), "--budget", "500"])
    assert done.exit_code == 1
    lines = [line for line in done.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "compaction: error: the request cannot fit the budget of 500"
    )
    assert "the system messages and the messages pinned before the live window" in lines[0]
    assert "Traceback" not in done.output


def test_a_uuid_used_twice_by_different_events_is_noted_and_a_repeat_is_not(tmp_path: Path) -> None:
    from compaction.formats import load_transcript

    events = [
        user_event("a", None, "hi"),
        assistant_event("b", "a", "yo"),
        user_event("a", "b", "another prompt"),
    ]
    events += [
        assistant_event("b", "a", "yo"),
        assistant_event("c", "a", "ok"),
    ]  # line 4 repeats line 2 exactly
    parsed = load_transcript(write_session(tmp_path / "dup.jsonl", events), format="claude-code")
    assert [m.text() for m in parsed.messages] == ["hi", "yo", "ok"]
    assert parsed.problems == [
        f"{tmp_path / 'dup.jsonl'}:3: the user event's uuid 'a' is the event's at line 1, whose message differs; "
        "a uuid names one event, so this one is not imported"
    ]


def test_unicode_line_separators_inside_events_do_not_hide_a_rewind(tmp_path: Path) -> None:
    # JSON allows U+2028, NEL and form feed raw inside strings; str.splitlines() splits on them
    events = [
        user_event("r", None, "root \u2028 with \x85 separators \x0c inside"),
        assistant_event("ra", "r", "ans"),
        user_event("p1", "ra", "abandoned \u2028 x"),
        assistant_event("p1a", "p1", "x"),
        user_event("p2", "ra", "kept"),
        assistant_event("p2a", "p2", "k"),
    ]
    session = tmp_path / "seps.jsonl"
    session.write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in events), encoding="utf-8")
    tree = session_tree(session.read_text(encoding="utf-8"))
    assert [(t.kind, t.start, t.lines) for t in tree.threads] == [("rewind", "p1", (0, 1, 2, 3))]
    store = tmp_path / "s.db"
    report = _import(session, store)
    assert (report["messages"], [b["name"] for b in report["branches"]]) == (4, ["seps@p1"])
    assert _texts(store, "seps@p1") == [
        "root \u2028 with \x85 separators \x0c inside",
        "ans",
        "abandoned \u2028 x",
        "x",
    ]


def test_inspect_of_a_pin_in_the_live_window_shows_it_raw_once_and_adds_up() -> None:
    # ``compaction pin 79`` on an 81-message store, then ``inspect --budget 5000``: the pin is
    # in the window, so compile shows it there, once; inspect counted it as in the system
    # text too and failed "the request's parts add up to 4800 tokens, the gate counted 4828".
    from compaction import Message, Recipe, Store
    from compaction.inspect import inspect_store
    from compaction.pipeline import compress_and_compile

    history = [
        Message(
            "user" if i % 2 == 0 else "assistant", [{"type": "text", "text": f"turn {i}: " + "words " * 60}]
        )
        for i in range(81)
    ]
    recipe = Recipe(budget_tokens=5000)
    with Store(":memory:") as store:
        store.append(history)
        compress_and_compile(store, recipe)
        assert store.pin(79)
        compiled, _ticks = compress_and_compile(store, recipe)
        assert compiled.live_start <= 79  # the pin is in the live window
        data = inspect_store(store, recipe)
    assert sum(p.tokens for p in data.composition) == data.tokens == compiled.tokens
    row = data.messages[79]
    assert (row.seq, row.state) == (79, "raw")
    assert [r.seq for r in data.messages] == list(range(81))
