"""Property: a Claude Code session with random rewinds and parallel tool calls imports with
``--branches`` losing nothing and storing nothing twice.

Sessions are generated as Claude Code writes them: turns of a prompt (some behind a hook
``progress`` event) and an answer (some answers make two parallel tool calls, a block a line under one message id, each result
naming its own call), and rewinds (a new prompt continuing the event an earlier prompt
continued).  For each: every event off the main conversation is in a rewind thread; the
store holds exactly as many message rows as the flattened import has messages (each
message once, in the conversation or in the one branch that owns it); every conversation
compiles (the gate checks coverage and tool pairing); importing again adds nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction import Recipe, compile_request
from compaction.cli import main
from compaction.formats import load_transcript
from compaction.formats._claude_code_tree import session_tree
from compaction.store import list_conversations, open_store


def _line(
    uuid: str, parent: str | None, kind: str, content: object, message_id: str | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if message_id:
        message["id"] = message_id
    return {
        "type": kind,
        "uuid": uuid,
        "parentUuid": parent,
        "isSidechain": False,
        "sessionId": "s",
        "message": message,
    }


@st.composite
def sessions(draw: Any) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    prompts: list[str | None] = []  # the parent of each prompt so far (where a rewind may go back to)
    last: str | None = None
    for turn in range(draw(st.integers(min_value=1, max_value=7))):
        parent = last
        if prompts and draw(st.booleans()):
            parent = draw(st.sampled_from(prompts))  # a rewind: ask again from where an earlier prompt was
        prompt = f"p{turn}"
        if draw(st.booleans()):  # the prompt's hook, written before it (newer versions)
            hook = {
                "type": "progress",
                "uuid": f"h{turn}",
                "parentUuid": parent,
                "sessionId": "s",
                "data": {},
            }
            events.append(hook)
            events.append(_line(prompt, f"h{turn}", "user", f"ask {turn}"))
        else:
            events.append(_line(prompt, parent, "user", f"ask {turn}"))
        prompts.append(parent)
        if draw(st.booleans()):  # two parallel tool calls, one line each, then their results
            calls = [
                {"type": "tool_use", "id": f"t{turn}{i}", "name": "Read", "input": {"n": i}} for i in (0, 1)
            ]
            events.append(_line(f"c{turn}0", prompt, "assistant", [calls[0]], f"m{turn}"))
            events.append(_line(f"c{turn}1", f"c{turn}0", "assistant", [calls[1]], f"m{turn}"))
            for i in (1, 0):
                result = [{"type": "tool_result", "tool_use_id": f"t{turn}{i}", "content": f"out {turn}{i}"}]
                events.append(_line(f"r{turn}{i}", f"c{turn}{i}", "user", result))
            answer_parent = f"r{turn}0"
        else:
            answer_parent = prompt
        events.append(_line(f"a{turn}", answer_parent, "assistant", f"answer {turn}", f"n{turn}"))
        last = f"a{turn}"
    return events


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(events=sessions())
def test_rewinds_import_as_branches_losing_nothing_and_storing_nothing_twice(
    events: list[dict[str, Any]], tmp_path_factory: Any
) -> None:
    work = tmp_path_factory.mktemp("cc")
    path = work / "session.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    tree = session_tree(path.read_text())
    in_threads = {line for thread in tree.threads for line in thread.lines}
    assert all(line in tree.main or line in in_threads for line in range(len(events)))
    store = work / "s.db"
    done = CliRunner().invoke(main, ["import", str(path), "--store", str(store), "--branches", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert len(report["branches"]) == len(tree.threads) == sum(1 for t in tree.threads if t.kind == "rewind")
    flattened = load_transcript(Path(path))
    with open_store(str(store), conversation=report["conversation"]) as opened:
        rows = int(opened._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
    assert rows == len(flattened.messages)  # each message once, wherever it went
    for info in list_conversations(str(store)):
        with open_store(str(store), conversation=info.name) as opened:
            assert compile_request(opened, Recipe(budget_tokens=100_000)).total_messages == info.messages
    again = CliRunner().invoke(main, ["import", str(path), "--store", str(store), "--branches", "--json"])
    assert json.loads(again.stdout)["added"] == 0
    assert all(b["added"] == 0 for b in json.loads(again.stdout)["branches"])
