"""``compaction edit --content`` with a block type no request format knows warns in one line, and keeps it.

The store keeps unknown blocks verbatim (an import does too, and says so on stderr), so an
edit holding one is stored as given and the command warns, naming each unknown type and
count; an edit of known blocks prints no warning.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from compaction import Message, Store
from compaction.blocks import text_block
from compaction.cli import main


def test_an_edit_with_an_unknown_block_warns_once_and_keeps_it(tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    with Store(store) as opened:
        opened.append([Message("user", (text_block("hello"),)), Message("assistant", (text_block("hi"),))])
    strange = {"type": "widget_state", "state": {"open": True}}
    content = tmp_path / "c.json"
    content.write_text(json.dumps([{"type": "text", "text": "see the widget"}, strange, dict(strange)]))
    done = CliRunner().invoke(main, ["edit", "--store", str(store), "1", "--content", str(content)])
    assert done.exit_code == 0, done.output
    assert done.stderr == (
        "warning: unknown blocks kept verbatim: 2 widget_state (no request format knows them; each is rendered "
        "by the loud default rule, as an import renders them)\n"
    )
    with Store(store) as opened:
        assert list(opened.messages(1, 2)[0].content) == [
            {"type": "text", "text": "see the widget"},
            strange,
            strange,
        ]
    known = tmp_path / "k.json"
    known.write_text(json.dumps([{"type": "text", "text": "plain"}]))
    quiet = CliRunner().invoke(main, ["edit", "--store", str(store), "1", "--content", str(known), "--json"])
    assert quiet.exit_code == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["revision"] == 2
