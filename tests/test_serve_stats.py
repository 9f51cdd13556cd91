"""``compaction serve-stats DIR``: one line per conversation of a proxy's store directory, or JSON."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from serve_support import MockUpstream, make_app, post

from compaction.cli import main

OPENAI = "/v1/chat/completions"
LINE = "FAILED tests/test_parser.py::test_case - AssertionError: expected list, got None\n"


def _history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(turns):
        call = {"id": f"call_{turn}", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\":\"make\"}"}}
        history += [{"role": "user", "content": f"ask {turn}: fix case {turn}"},
                    {"role": "assistant", "content": None, "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": f"call_{turn}", "content": LINE * 8},
                    {"role": "assistant", "content": f"fixed {turn}"}]
    return history + [{"role": "user", "content": "and now the last one"}]


def test_serve_stats_lists_each_conversation(tmp_path: Path) -> None:
    began = time.time()
    app = make_app(tmp_path, MockUpstream(), budget=1500)
    long = _history(24)  # 98 messages, far over 1,500 tokens even with tool outputs masked: summarized
    for _ in range(2):
        assert post(app, OPENAI, {"model": "gpt-4o", "messages": long}, {"X-Compaction-Conversation": "long"}
                    ).status_code == 200
        long = long + [{"role": "assistant", "content": "done"}, {"role": "user", "content": "one more"}]
    short = [{"role": "user", "content": "hello"}]
    assert post(app, OPENAI, {"model": "gpt-4o", "messages": short}, {"X-Compaction-Conversation": "short"}
                ).status_code == 200
    ended = time.time()

    result = CliRunner().invoke(main, ["serve-stats", str(tmp_path / "stores"), "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["conversation"]: row for row in json.loads(result.output)}
    assert sorted(rows) == ["long", "short"]
    # the second request appended its ask past the recorded answer; its own answer is stored too
    assert (rows["long"]["messages"], rows["long"]["requests"]) == (len(long) - 1, 2)
    assert rows["long"]["summaries"] >= 1 and rows["long"]["events"] >= 1
    assert {k: v for k, v in rows["short"].items() if k != "last_used"} == {
        "conversation": "short", "messages": 2, "summaries": 0, "events": 0, "requests": 1}
    for row in rows.values():
        used = dt.datetime.strptime(row["last_used"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        assert int(began) <= used.timestamp() <= ended + 1

    # `compaction stats --store-dir DIR` (the spelling) gives the same listing
    again = CliRunner().invoke(main, ["stats", "--store-dir", str(tmp_path / "stores"), "--json"])
    assert again.exit_code == 0 and json.loads(again.output) == json.loads(result.output)

    text = CliRunner().invoke(main, ["serve-stats", str(tmp_path / "stores")])
    assert text.exit_code == 0
    header, first, second = text.output.splitlines()
    assert header.split() == ["conversation", "messages", "summaries", "events", "requests", "last", "used"]
    assert first.split() == ["long", str(len(long) - 1), str(rows["long"]["summaries"]),
                                 str(rows["long"]["events"]), "2", rows["long"]["last_used"]]
    assert second.split() == ["short", "2", "0", "0", "1", rows["short"]["last_used"]]


def test_serve_stats_on_a_missing_directory_fails_clearly(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["serve-stats", str(tmp_path / "nowhere")])
    assert result.exit_code == 1
    assert "no such store directory" in result.output


def test_stats_wants_exactly_one_of_store_and_store_dir(tmp_path: Path) -> None:
    for args in ([], ["--store", str(tmp_path / "a.db"), "--store-dir", str(tmp_path)]):
        result = CliRunner().invoke(main, ["stats", *args])
        assert result.exit_code == 2 and "give one of --store DB" in result.output
