"""The lean cold start: the compiled counter holds the ranks once, and heavy imports wait."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from importlib import resources

import pytest

from compaction.errors import EncodingDataMissing
from compaction.tokens import encodings
from compaction.tokens.encodings import ENCODINGS, load_ranks, rank_file


def _run(code: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "COMPACTION_NO_EXTENSIONS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_first_count_builds_only_the_native_table() -> None:
    # Before: the first count built a Python dict of the ranks (35 MB for o200k_base) and
    # tiktoken's encoder (39 MB) beside the native table, and imported tiktoken.
    seen = _run(
        "import json, sys\n"
        "from compaction.tokens import encodings, fast\n"
        "from compaction.tokens.counting import count_text\n"
        "n = count_text('hello world') + count_text('hello world', 'cl100k_base')\n"
        "print(json.dumps({'n': n, 'impl': fast.IMPLEMENTATION, 'tiktoken': 'tiktoken' in sys.modules,\n"
        "                  'dicts': sorted(encodings._ranks_cache), 'encoders': sorted(encodings._cache)}))"
    )
    assert seen == {"n": 4, "impl": "c", "tiktoken": False, "dicts": [], "encoders": []}


def test_import_compaction_leaves_the_http_client_and_tiktoken_unimported() -> None:
    seen = _run(
        "import json, sys\nimport compaction\n"
        "print(json.dumps(sorted(m for m in ('httpx', 'httpcore', 'tiktoken', 'numpy') if m in sys.modules)))"
    )
    assert seen == []


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_rank_file_is_the_checked_tiktoken_file(name: str) -> None:
    text = rank_file(name)
    ranks = load_ranks(name)
    assert text.count(b"\n") == len(ranks)
    assert len(ranks) == {"o200k_base": 199998, "cl100k_base": 100256}[name]


def test_a_corrupt_rank_file_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    spec = ENCODINGS["cl100k_base"]
    packed = resources.files("compaction.tokens").joinpath("data").joinpath(spec.filename).read_bytes()
    corrupt = tmp_path / spec.filename
    corrupt.write_bytes(gzip.compress(gzip.decompress(packed).replace(b" 0\n", b" 1\n", 1)))

    class _Files:
        def joinpath(self, _part: str) -> object:
            return self

    class _Data(_Files):
        def joinpath(self, part: str) -> object:
            return corrupt if part == spec.filename else self

    monkeypatch.setattr(encodings.resources, "files", lambda _package: _Data())
    with pytest.raises(EncodingDataMissing, match="has sha256 .* expected 223921b7"):
        rank_file("cl100k_base")
