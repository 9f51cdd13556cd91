"""``compaction count --engine dask``: partitions of files counted on a cluster give the local counts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from compaction.cli import main
from compaction.errors import CompactionError
from compaction.fleet.counting import (
    StoreCount,
    count_files_on_dask,
    count_partition,
    count_store_messages,
    partitions,
)
from compaction.inspect import message_text
from compaction.pipeline import import_transcript
from compaction.store import open_store
from compaction.tokens.batch import count_batch

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FILES = sorted(
    str(p)
    for p in [
        *EXAMPLES.glob("*.json*"),
        *EXAMPLES.glob("claude-code/*.jsonl"),
        EXAMPLES / "aider__chat-history__slice.md",
    ]
)


@given(
    sizes=st.lists(st.integers(0, 5000), max_size=40),
    partition_bytes=st.integers(1, 20000),
    at_least=st.integers(1, 8),
)
def test_partitions_cover_every_file_once_in_order(
    sizes: list[int], partition_bytes: int, at_least: int
) -> None:
    runs = partitions(sizes, partition_bytes, at_least)
    assert [i for run in runs for i in run] == list(range(len(sizes)))
    assert all(len(run) > 0 for run in runs)
    for run in runs:  # a run holds at most the bytes asked for, unless it is one file alone
        assert len(run) == 1 or sum(sizes[i] for i in run) <= partition_bytes


@pytest.mark.parametrize("method", ["exact", "fast", "estimate"])
def test_dask_partitions_give_the_local_counts(method: str) -> None:
    local = count_partition(FILES, "o200k_base", method)
    on_dask = count_files_on_dask(
        FILES, "o200k_base", method, workers=2, processes=False, partition_bytes=200_000
    )
    assert on_dask == local
    assert sum(tokens for _c, tokens in local) > 1_000_000  # a real corpus, not an empty one


def test_the_command_on_dask_prints_the_local_report(tmp_path: Path) -> None:
    args = ["count", "--json", "--method", "fast", *FILES[:4]]
    local = CliRunner().invoke(main, args)
    on_dask = CliRunner().invoke(main, [*args, "--engine", "dask", "--workers", "2"])
    assert local.exit_code == 0 and on_dask.exit_code == 0, on_dask.output
    assert json.loads(on_dask.output) == json.loads(local.output)
    assert json.loads(local.output)["total"] == sum(f["tokens"] for f in json.loads(local.output)["files"])


def test_a_file_that_is_not_utf8_is_one_error_on_either_engine(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok then \xff\xfe")
    with pytest.raises(CompactionError, match=r"bad.txt: not UTF-8 text \(byte 0xff at offset 8\)"):
        count_files_on_dask([FILES[0], str(bad)], "o200k_base", "fast", workers=2, processes=False)
    result = CliRunner().invoke(main, ["count", str(bad)])
    assert result.exit_code == 1 and "not UTF-8 text (byte 0xff at offset 8)" in result.output
    usage = CliRunner().invoke(main, ["count", "--scheduler", "tcp://127.0.0.1:1", str(bad)])
    assert usage.exit_code == 2 and "--scheduler needs --engine dask" in usage.output


# -- a store's messages ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def pi_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    location = str(tmp_path_factory.mktemp("count") / "pi.sqlite")
    with open_store(location) as store:
        import_transcript(store, EXAMPLES / "pi__pi-mono__before-compaction.jsonl")
    return location


def test_a_stores_messages_count_the_same_on_dask_in_partitions(pi_store: str) -> None:
    with open_store(pi_store, create=False) as store:
        texts = [message_text(m.content) for m in store.messages()]
    direct = StoreCount(len(texts), sum(map(len, texts)), int(count_batch(texts, "o200k_base", "fast").sum()))
    assert direct.messages == 962 and direct.tokens > 100_000
    assert count_store_messages(pi_store, "o200k_base", "fast") == direct
    on_dask = count_store_messages(
        pi_store, "o200k_base", "fast", engine="dask", workers=2, processes=False, partition_messages=100
    )
    assert on_dask == direct  # 10 partitions, the same sums


def test_the_command_counts_a_store_and_wants_files_or_a_store(pi_store: str, tmp_path: Path) -> None:
    local = CliRunner().invoke(main, ["count", "--store", pi_store, "--json"])
    assert local.exit_code == 0, local.output
    data = json.loads(local.output)
    assert data == {
        "encoding": "o200k_base",
        "method": "fast",
        "messages": 962,
        "characters": count_store_messages(pi_store, "o200k_base", "fast").characters,
        "total": count_store_messages(pi_store, "o200k_base", "fast").tokens,
    }
    neither = CliRunner().invoke(main, ["count"])
    both = CliRunner().invoke(main, ["count", "--store", pi_store, FILES[0]])
    assert neither.exit_code == both.exit_code == 2 and "give FILES to count, or --store S" in both.output
    missing = CliRunner().invoke(main, ["count", "--store", str(tmp_path / "none.sqlite")])
    assert (
        missing.exit_code == 1
        and missing.output.startswith("compaction: error: ")
        and missing.output.count("\n") == 1
    )
