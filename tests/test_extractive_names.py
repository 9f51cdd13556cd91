"""The offline summary's Names section: which names it lists, in what order, merged and bounded.

The histories are built the way the compactor asks for an L1 (see ``test_extractive_sections``);
the names are those ``compaction eval`` probes (:func:`compaction.evidence.identifiers`).
"""

from __future__ import annotations

import re
from collections import Counter

from test_extractive_sections import ENCODING, call, l1, merged, result, section, text

from compaction.summarizers._record import MAX_NAMES, Record, merge_records, parse_record, render
from compaction.tokens.counting import count_text

#: (name, how often it occurs); the chunk below names each exactly that often outside tool outputs.
COUNTS = [("fetch_rows", 4), ("StoreReader", 4), ("LEGACY_SEQ", 3), ("migrateTable", 3), ("PROJ-481", 2)]


def chunk() -> list:
    return [
        text("user", "Port fetch_rows to StoreReader and close PROJ-481; LEGACY_SEQ must stay."),
        ("assistant", (
            {"type": "text", "text": "I'll read fetch_rows first, then wrap it in StoreReader."},
            {"type": "tool_use", "id": "c1", "name": "Read", "input": {"file_path": "/repo/src/rows.py"}},
        )),
        # a tool output names plenty, more often than anything else: none of it is listed
        result("c1", "def fetch_rows():\n" + "    hidden_helper(row_cursor)\n" * 40),
        call("c2", "Edit", file_path="/repo/src/rows.py", old_string="def fetch_rows(", new_string="def migrateTable("),
        result("c2", "The file /repo/src/rows.py has been updated."),
        call("c3", "Bash", command="grep -n LEGACY_SEQ src/rows.py && pytest -k migrateTable"),
        result("c3", "1 passed"),
        text("assistant", "StoreReader now calls migrateTable; fetch_rows keeps LEGACY_SEQ for PROJ-481 and StoreReader."),
    ]


def names(record: str) -> list[tuple[str, int]]:
    """Return ``(name, count)`` of the Names section, in order."""
    shown = [p for line in section(record, "Names") if not line.startswith("…") for p in line.split(", ")]
    return [(n, int(c or 1)) for n, c in (re.fullmatch(r"(\S+?)(?: ×(\d+))?", p).groups() for p in shown)]  # type: ignore[union-attr]


def test_names_are_ranked_by_how_often_the_chunk_names_them() -> None:
    record = l1(chunk())
    assert names(record) == COUNTS  # ties (4 and 4, 3 and 3) in the order first seen
    assert "hidden_helper" not in record and "row_cursor" not in record
    assert section(record, "Names") == ["fetch_rows ×4, StoreReader ×4, LEGACY_SEQ ×3, migrateTable ×3, PROJ-481 ×2"]


def test_names_read_back_and_merge_by_adding_counts() -> None:
    once = l1(chunk())
    assert dict(parse_record(once).names) == dict(COUNTS)
    both = merged([once, l1([text("user", "Now rename migrateTable to migrate_table in every caller.")])])
    assert names(both)[:3] == [("fetch_rows", 4), ("StoreReader", 4), ("migrateTable", 4)]
    assert ("migrate_table", 1) in names(both)


def _child(index: int) -> str:
    """A record naming ``common_name`` twice and ``sharedThing`` once, and six names of its own."""
    own = ", ".join(f"child{index}_name{k}" for k in range(6))
    return l1([
        text("user", f"Step {index}: keep common_name, sharedThing and common_name working."),
        call(f"g{index}", "Read", file_path=f"src/m{index}.py", symbols=own),
        result(f"g{index}", "def f():\n    pass\n"),
    ], start=index * 3, max_tokens=300)


def test_a_merge_of_six_keeps_the_most_frequent_names_within_its_bound() -> None:
    children = [_child(i) for i in range(6)]
    assert names(children[0])[:3] == [("common_name", 2), ("sharedThing", 1), ("child0_name0", 1)]
    known = Counter[str]()
    for child in children:
        known.update(parse_record(child).names)
    assert len(known) == 2 + 6 * 6
    bound = 300
    top = merged(children, bound)
    assert count_text(top, ENCODING) <= bound
    assert len(section(top, "Asks")) == 6  # the names went first
    shown = names(top)
    assert shown[:3] == [("common_name", 12), ("sharedThing", 6), ("child0_name0", 1)]
    assert shown == sorted(known.items(), key=lambda item: -item[1])[: len(shown)]
    left = re.fullmatch(r"… (\d+) more left out", section(top, "Names")[-1])
    assert left is not None and len(shown) + int(left.group(1)) == len(known)


def test_names_go_first_when_a_record_is_over_its_bound() -> None:
    record = Record(
        goal="port the store",
        done=[f"ran `make step{i}` → ok" for i in range(6)],
        decisions=["I'll keep the reader behind a flag."],
        names=Counter({f"name_{i:02d}": 30 - i for i in range(24)}),
    )
    full = render(record, 10_000, ENCODING)
    assert len(names(full)) == 24 and len(section(full, "Names")) == 2  # two lines
    tight = render(record, count_text(full, ENCODING) - 20, ENCODING)
    assert section(tight, "Done") == section(full, "Done") and section(tight, "Decisions") == section(full, "Decisions")
    kept = names(tight)
    assert kept == names(full)[: len(kept)] and len(kept) < 24  # the least frequent went
    assert section(tight, "Names")[-1] == f"… {24 - len(kept)} more left out"
    tighter = render(record, 60, ENCODING)
    assert "Names:" not in tighter and "Names 24" in tighter  # all names gone before the other lines
    assert count_text(tighter, ENCODING) <= 60


def test_a_record_shows_at_most_max_names_and_counts_the_rest() -> None:
    record = Record(goal="g", names=Counter({f"name_{i:03d}": 100 - i for i in range(MAX_NAMES + 7)}))
    out = render(record, 10_000, ENCODING)
    assert len(names(out)) == MAX_NAMES and section(out, "Names")[-1] == "… 7 more left out"
    assert merge_records([parse_record(out)]).omitted["Names"] == 7


def test_older_identifier_lines_and_model_lines_read_as_names() -> None:
    record = parse_record("Identifiers:\n- src/a.py, load_config\nNames:\n- `parse_args` (the CLI), runMain ×3")
    assert dict(record.names) == {"load_config": 1, "parse_args": 1, "runMain": 3}


def test_a_chunk_of_only_a_statement_still_says_what_was_said() -> None:
    record = l1([("assistant", (
        {"type": "text", "text": "The handler_fn wraps fetch_rows for now"},
        {"type": "tool_use", "id": "t1", "name": "TodoWrite", "input": {"todos": []}},
    )), result("t1", "Todos have been modified successfully.")])
    assert section(record, "Done") == ["said: The handler_fn wraps fetch_rows for now"]
    assert names(record) == [("handler_fn", 1), ("fetch_rows", 1)]


def test_names_are_deterministic() -> None:
    assert l1(chunk()) == l1(chunk())
    children = [_child(i) for i in range(6)]
    assert merged(children, 300) == merged(list(children), 300)
