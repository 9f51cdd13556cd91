"""`compaction inspect` and `compaction show` on a store of several conversations (--conversation)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction import Message
from compaction.cli import main
from compaction.store import open_store


def _two_conversations(tmp_path: Path) -> Path:
    path = tmp_path / "s.sqlite"
    for name in ("alpha", "beta"):
        with open_store(path, conversation=name) as store:
            store.append(
                [
                    Message("user", ({"type": "text", "text": f"plan the {name} release"},)),
                    Message("assistant", ({"type": "text", "text": f"the {name} plan is ready"},)),
                ]
            )
    return path


def test_inspect_and_show_read_the_conversation_named(tmp_path: Path) -> None:
    path = _two_conversations(tmp_path)
    runner = CliRunner()
    inspected = runner.invoke(
        main, ["inspect", "--store", str(path), "--budget", "4000", "--json", "--conversation", "beta"]
    )
    assert inspected.exit_code == 0, inspected.output
    data = json.loads(inspected.output)
    assert data["total_messages"] == 2
    assert "beta release" in inspected.output and "alpha" not in inspected.output
    shown = runner.invoke(main, ["show", "--store", str(path), "--seq", "0", "--json", "--conversation", "alpha"])
    assert shown.exit_code == 0, shown.output
    assert "plan the alpha release" in shown.output and "beta" not in shown.output


def test_without_a_name_a_store_of_several_conversations_is_one_clear_error(tmp_path: Path) -> None:
    path = _two_conversations(tmp_path)
    inspect = ["inspect", "--store", str(path), "--budget", "4000", "--json"]  # no budget: a usage error first
    for args in (inspect, ["show", "--store", str(path), "--seq", "0"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1
        assert "alpha" in result.output and "beta" in result.output  # the choices are named
        assert "Traceback" not in result.output
