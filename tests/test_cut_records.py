"""The summarizer-side cut of records that do not fit one request (``Compactor._cut_records``)."""

from __future__ import annotations

from strategies import CapturingSummarizer

from compaction import Compactor, Recipe, Store


def test_records_just_over_the_window_are_cut_to_fit_though_the_marker_outweighs_the_cut() -> None:
    """A stitch of two records a few tokens over the summarizer's window: the cut's own marker
    (about 40 tokens) is longer than what must go, so a cut aimed at the bare excess grew the
    record and the request was refused as over its limit (found by the grammar fuzz)."""
    recipe = Recipe(summarizer_context_tokens=889, summary_max_tokens=153)
    with Store(":memory:") as store:
        compactor = Compactor(store, recipe, CapturingSummarizer())
        labels = ["part 1", "part 2"]
        words = [f"step {i} edited src/module_{i}.py and ran the tests" for i in range(400)]
        for n in range(10, 400):
            texts = ["\n".join(words[:n]), "\n".join(words[1 : n + 1])]
            request = compactor._merge_request(texts, labels, "stitch")
            over = compactor._gate(request).tokens - compactor.request_limit
            if over > 0:
                break
        assert 0 < over <= 40  # just over: less than the cut's marker
        first = compactor._gate(compactor._merge_request(texts, labels, "stitch"))
        gated = compactor._cut_records(texts, labels, "stitch", first)
        assert gated.tokens <= compactor.request_limit
        assert "are left out of this summary request" in gated.payload.decode()
