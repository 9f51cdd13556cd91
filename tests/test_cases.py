"""The failure-shape cases of tests/data/cases, each line of ``expect`` asserted on the bytes.

Settings map to the recipe: ``budget_tokens`` -> ``Recipe.budget_tokens``, ``image_policy =
"placeholders"`` -> ``vision = False``, ``chunk_target_tokens``, ``summarizer_context_tokens``,
``max_compression_image_bytes`` and ``encoding`` keep their names.  Each case also has a
hypothesis family (other positions, sizes, counts).
"""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from conftest import CASES, load_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import (
    CapturingSummarizer,
    check_tool_pairing,
    independent_tokens,
    payload_json,
    placeholders_in,
    png_b64,
    store_snapshot,
    wire_images,
)

from compaction import (
    Compactor,
    InvalidTranscript,
    OverBudget,
    Recipe,
    Store,
    compile_request,
    load_transcript,
)
from compaction.formats import parse_messages
from compaction.imageinfo import image_size
from compaction.tokens.counting import count_text
from compaction.tokens.image_pricing import max_image_tokens, price_image

FORMATS = ["openai", "anthropic"]
MODELS = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5"}
FAMILY = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def recipe_for(case: dict[str, Any], **overrides: Any) -> Recipe:
    s = case["settings"]
    values: dict[str, Any] = {"budget_tokens": s["budget_tokens"]}
    if s.get("image_policy") == "placeholders":
        values["vision"] = False
    for key in ("chunk_target_tokens", "summarizer_context_tokens", "max_compression_image_bytes", "encoding"):
        if key in s:
            values[key] = s[key]
    values.update(overrides)
    return Recipe(**values)


def store_of(messages: list[dict[str, Any]]) -> Store:
    store = Store(":memory:")
    store.append(parse_messages(messages, format="anthropic"))
    return store


def compile_as(store: Store, recipe: Recipe, fmt: str, **kw: Any) -> Any:
    return compile_request(store, recipe.replace(output_format=fmt, model=MODELS[fmt]), **kw)


def body_strings(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


# -- data-uri-in-tool-output ---------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_data_uri_in_tool_output(fmt: str) -> None:
    case = load_case("data-uri-in-tool-output")
    raw = case["messages"][2]["content"][0]["content"]
    uri = raw[raw.index("data:image/png;base64,") : raw.index('"', raw.index("data:image"))]
    store = store_of(case["messages"])
    try:
        before = store_snapshot(store)
        # under placeholders the data URI is replaced inside the string by a placeholder
        hidden = compile_as(store, recipe_for(case), fmt)
        body = payload_json(hidden.request.payload)
        assert wire_images(body) == []
        assert "data:image" not in hidden.request.payload.decode()
        text = body_strings(body)
        assert '\\"status\\": \\"ok\\"' in text and '\\"favicon\\": \\"[image not shown:' in text
        (found,) = placeholders_in(body)
        assert "image/png" in found.group("what") and "text-only" in found.group("reason")
        # under live it is priced as an image by its pixel size, not as text
        live = compile_as(store, recipe_for(case, vision=True), fmt)
        shipped = wire_images(payload_json(live.request.payload))
        assert len(shipped) == 1 and live.request.images_shown == 1
        assert shipped[0].data == base64.b64decode(uri.split(",", 1)[1])
        _media, width, height = image_size(shipped[0].data)
        price = price_image(width, height, MODELS[fmt]).tokens
        as_text = count_text(uri)
        assert price <= live.tokens < price + 200 < as_text
        assert independent_tokens(payload_json(live.request.payload), MODELS[fmt]) <= live.tokens
        assert store_snapshot(store) == before
    finally:
        store.close()


@FAMILY
@given(
    sizes=st.lists(st.tuples(st.integers(1, 64), st.integers(1, 64)), min_size=1, max_size=3),
    filler=st.lists(st.sampled_from(["ok", "status", "x", "{", "}", ",", " "]), max_size=6),
    fmt=st.sampled_from(FORMATS),
)
def test_data_uri_family(sizes: list[tuple[int, int]], filler: list[str], fmt: str) -> None:
    uris = [f"data:image/png;base64,{png_b64(w, h, i)}" for i, (w, h) in enumerate(sizes)]
    output = "".join(f"{''.join(filler)} {uri} " for uri in uris)
    case = load_case("data-uri-in-tool-output")
    messages = copy.deepcopy(case["messages"])
    messages[2]["content"][0]["content"] = output
    store = store_of(messages)
    try:
        hidden = compile_as(store, recipe_for(case), fmt)
        body = payload_json(hidden.request.payload)
        assert wire_images(body) == []
        assert len(placeholders_in(body)) == len(uris)
        live = compile_as(store, recipe_for(case, vision=True), fmt)
        assert len(wire_images(payload_json(live.request.payload))) == len(uris)
        priced = sum(price_image(w, h, MODELS[fmt]).tokens for w, h in sizes)
        assert priced <= live.tokens < priced + 200
    finally:
        store.close()


# -- image-in-mixed-tool-round ---------------------------------------------------------------------
def _mixed_round_checks(case: dict[str, Any], messages: list[dict[str, Any]], image_count: int) -> None:
    images = [
        base64.b64decode(b["source"]["data"])
        for block in messages[2]["content"] if block["type"] == "tool_result"
        for b in block["content"] if b["type"] == "image"
    ]
    assert len(images) == image_count
    for recipe in (recipe_for(case), recipe_for(case, vision=True, max_compression_image_bytes=1)):
        store = store_of(messages)
        try:
            before = store_snapshot(store)
            summarizer = CapturingSummarizer()
            Compactor(store, recipe, summarizer).tick(close_tail=True)
            l1s = store.summaries(level=1)
            holding = [s for s in l1s if s.start_seq <= 2 < s.end_seq]
            assert len(holding) == 1, "the round is summarized"
            assert summarizer.requests, "the L1 prompts were sent"
            saw_placeholder = False
            for _kind, payload in summarizer.requests:
                body = payload_json(payload)
                assert wire_images(body) == [], "an image reached the summarizer"
                check_tool_pairing(body, "openai")
                saw_placeholder |= bool(placeholders_in(body))
            assert saw_placeholder, "the image is named in the L1 prompt"
            # the store is unaffected, and the live window under live still ships the image
            assert store_snapshot(store) == before
            live = compile_request(store, recipe_for(case, vision=True), budget=100_000)
            shipped = [i.data for i in wire_images(payload_json(live.request.payload))]
            assert shipped == images
            try:
                small = compile_request(store, recipe)
            except OverBudget as err:
                assert err.budget == 600 and err.needed > 600
            else:
                assert small.tokens <= 600
                assert recipe.vision or wire_images(payload_json(small.request.payload)) == []
        finally:
            store.close()


def test_image_in_mixed_tool_round() -> None:
    case = load_case("image-in-mixed-tool-round")
    _mixed_round_checks(case, case["messages"], 1)


@FAMILY
@given(count=st.integers(1, 3), text_first=st.booleans(), size=st.integers(8, 200))
def test_image_in_mixed_tool_round_family(count: int, text_first: bool, size: int) -> None:
    case = load_case("image-in-mixed-tool-round")
    messages = copy.deepcopy(case["messages"])
    result = messages[2]["content"][0]
    result["content"] = [{"type": "text", "text": "Screenshot taken."}] + [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png_b64(size, size // 2 + 1, i)}}
        for i in range(count)
    ]
    others = [b for b in messages[2]["content"] if b["type"] != "tool_result"]
    messages[2]["content"] = (others + [result]) if text_first else ([result] + others)
    _mixed_round_checks(case, messages, count)


# -- image-in-newest-message -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_image_in_newest_message(fmt: str) -> None:
    case = load_case("image-in-newest-message")
    original = base64.b64decode(case["messages"][-1]["content"][1]["source"]["data"])
    store = store_of(case["messages"])
    try:
        hidden = compile_as(store, recipe_for(case), fmt)
        body = payload_json(hidden.request.payload)
        assert wire_images(body) == []
        assert hidden.live_start == 0
        last = body["messages"][-1]
        (found,) = placeholders_in({"messages": [last]})  # replaced in this same compile, in place
        assert "image/png" in found.group("what") and found.group("reason")
        live = compile_as(store, recipe_for(case, vision=True), fmt)
        assert [i.data for i in wire_images(payload_json(live.request.payload))] == [original]
    finally:
        store.close()


@FAMILY
@given(before=st.integers(0, 3), after=st.integers(0, 2), fmt=st.sampled_from(FORMATS), depth=st.integers(0, 500))
def test_image_in_newest_message_family(before: int, after: int, fmt: str, depth: int) -> None:
    case = load_case("image-in-newest-message")
    messages = copy.deepcopy(case["messages"])
    image = messages[-1]["content"][1]
    text = {"type": "text", "text": "look"}
    messages[-1]["content"] = [text] * before + [image] + [text] * after
    store = store_of(messages)
    try:
        # a depth cap never reaches the newest message; placeholders always do
        shown = compile_as(store, recipe_for(case, vision=True, image_strip_depth_tokens=depth), fmt)
        assert shown.request.images_shown == 1
        hidden = compile_as(store, recipe_for(case), fmt)
        assert wire_images(payload_json(hidden.request.payload)) == []
        assert len(placeholders_in(payload_json(hidden.request.payload))) == 1
    finally:
        store.close()


# -- newest-turn-over-budget ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_newest_turn_over_budget(fmt: str) -> None:
    case = load_case("newest-turn-over-budget")
    store = store_of(case["messages"])
    try:
        before = store_snapshot(store)
        newest = count_text(case["messages"][-1]["content"][0]["text"])
        with pytest.raises(OverBudget) as caught:
            compile_as(store, recipe_for(case), fmt)
        assert caught.value.budget == 1000 and "1000" in str(caught.value)
        assert caught.value.needed >= newest > 1000
        assert store_snapshot(store) == before and store.summaries() == []
        # after compression the newest message alone is what cannot shrink
        Compactor(store, recipe_for(case)).tick(close_tail=True)
        with pytest.raises(OverBudget) as caught:
            compile_as(store, recipe_for(case), fmt)
        err = caught.value
        assert err.stage == "live window" and "the newest message" in str(err)
        assert err.budget == 1000 and err.needed >= newest
        assert store_snapshot(store) == before
    finally:
        store.close()


@FAMILY
@given(words=st.integers(300, 3000), budget=st.integers(100, 400))
def test_newest_turn_over_budget_family(words: int, budget: int) -> None:
    case = load_case("newest-turn-over-budget")
    messages = copy.deepcopy(case["messages"])
    messages[-1]["content"][0]["text"] = " ".join(["stale cache"] * words)
    store = store_of(messages)
    try:
        before = store_snapshot(store)
        with pytest.raises(OverBudget) as caught:
            compile_request(store, recipe_for(case, budget_tokens=budget))
        assert caught.value.budget == budget and caught.value.needed > budget
        assert store_snapshot(store) == before
    finally:
        store.close()


# -- oversized-tool-output ---------------------------------------------------------------------------
def test_oversized_tool_output() -> None:
    case = load_case("oversized-tool-output")
    recipe = recipe_for(case)
    store = store_of(case["messages"])
    try:
        before = store_snapshot(store)
        summarizer = CapturingSummarizer()
        Compactor(store, recipe, summarizer).tick()
        assert summarizer.requests
        for _kind, payload in summarizer.requests:
            assert independent_tokens(payload_json(payload), recipe.target_model) <= 8000
        assert store.failures() == []
        compiled = compile_request(store, recipe)
        assert compiled.tokens <= 2000
        covering = [s for s in compiled.summaries if s.start_seq <= 2 < s.end_seq]
        assert len(covering) == 1, "the output is covered by a summary"
        assert "./load-test.sh" in covering[0].text and "lines" in covering[0].text
        assert store_snapshot(store) == before
    finally:
        store.close()


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.integers(1500, 4000), context=st.integers(1000, 2500))
def test_oversized_tool_output_family(lines: int, context: int) -> None:
    case = load_case("oversized-tool-output")
    messages = copy.deepcopy(case["messages"])
    messages[2]["content"][0]["content"] = "\n".join(f"{i:06d} INFO worker processed batch {i}" for i in range(lines))
    recipe = recipe_for(case, summarizer_context_tokens=context, summary_max_tokens=200)
    store = store_of(messages)
    try:
        summarizer = CapturingSummarizer()
        Compactor(store, recipe, summarizer).tick(close_tail=True)
        for _kind, payload in summarizer.requests:
            assert independent_tokens(payload_json(payload), recipe.target_model) <= context
        assert any(s.start_seq <= 2 < s.end_seq for s in store.summaries(level=1))
    finally:
        store.close()


# -- tool pairs at the window edge, in the middle, and parallel fan-outs --------------------------------
def _sweep(messages: list[dict[str, Any]], case: dict[str, Any], budgets: range, fmt: str) -> list[Any]:
    """Compress, then compile at each budget; check every request; return the successes."""
    store = store_of(messages)
    try:
        recipe = recipe_for(case, chunk_target_tokens=40, chunk_min_messages=1, merge_fanout=2,
                            summary_max_tokens=60, output_format=fmt, model=MODELS[fmt])
        summarizer = CapturingSummarizer()
        Compactor(store, recipe, summarizer).tick(close_tail=True)
        for _kind, payload in summarizer.requests:
            check_tool_pairing(payload_json(payload), "openai")
        n = store.next_seq()
        done = []
        for budget in budgets:
            try:
                compiled = compile_request(store, recipe, budget=budget)
            except OverBudget as err:
                assert err.budget == budget and err.needed > budget
                continue
            body = payload_json(compiled.request.payload)
            check_tool_pairing(body, fmt)
            assert [r for r in compiled.request.replacements if r.kind.startswith("orphan")] == []
            if fmt == "anthropic":
                assert body["messages"][0]["role"] == "user"
            position = 0
            for summary in compiled.summaries:
                assert summary.start_seq == position
                position = summary.end_seq
            assert position == compiled.live_start
            assert set(compiled.raw_seqs) == set(range(compiled.live_start, n))
            assert compiled.tokens <= budget
            done.append(compiled)
        return done
    finally:
        store.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_pair_at_window_edge(fmt: str) -> None:
    case = load_case("tool-pair-at-window-edge")
    done = _sweep(case["messages"], case, range(100, 420, 4), fmt)
    assert done, "some budget in the sweep compiles"
    starts = {c.live_start for c in done}
    assert 2 not in starts, "the window never starts at the result"
    assert done[-1].live_start == 0  # a roomy budget shows everything raw


@pytest.mark.parametrize("fmt", FORMATS)
def test_tool_pair_in_the_middle(fmt: str) -> None:
    case = load_case("tool-pair-in-the-middle")
    done = _sweep(case["messages"], case, range(300, 900, 6), fmt)
    assert done
    rounds = [(1, 2), (5, 6), (9, 10), (13, 14)]
    for compiled in done:
        for _use, result in rounds:
            assert compiled.live_start not in (result,), "a round split by the window"
            assert not any(s.start_seq == result or s.end_seq == result for s in compiled.summaries)
    assert len({c.live_start for c in done}) > 1, "the sweep moves the window across rounds"


@pytest.mark.parametrize("fmt", FORMATS)
def test_parallel_tool_fanout(fmt: str) -> None:
    case = load_case("parallel-tool-fanout")
    done = _sweep(case["messages"], case, range(100, 500, 5), fmt)
    assert done
    for compiled in done:
        text = compiled.request.payload.decode()
        raw_ids = [i for i in ("toolu_0030", "toolu_0031", "toolu_0032") if i in text]
        assert compiled.live_start not in (2,)
        assert len(raw_ids) in (0, 3), "the three uses and results are kept or summarized together"


@FAMILY
@given(calls=st.integers(1, 4), fmt=st.sampled_from(FORMATS), words=st.integers(5, 60))
def test_parallel_tool_fanout_family(calls: int, fmt: str, words: int) -> None:
    case = load_case("parallel-tool-fanout")
    messages = copy.deepcopy(case["messages"])
    ids = [f"toolu_9{i:03d}" for i in range(calls)]
    messages[1]["content"] = [messages[1]["content"][0]] + [
        {"type": "tool_use", "id": i, "name": "grep", "input": {"pattern": i}} for i in ids
    ]
    messages[2]["content"] = [
        {"type": "tool_result", "tool_use_id": i, "content": " ".join(["cache"] * words), "is_error": False} for i in ids
    ]
    done = _sweep(messages, case, range(80, 800, 20), fmt)
    assert done
    for compiled in done:
        assert compiled.live_start != 2


# -- screenshot-pricing -----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_screenshot_pricing(fmt: str) -> None:
    case = load_case("screenshot-pricing")
    data = case["messages"][0]["content"][1]["source"]["data"]
    assert image_size(base64.b64decode(data))[1:] == (1920, 1080)
    # gpt-4o high detail: fit 2048, shortest side 768 -> 1365x768 -> 3x2 tiles of 512 px
    expected = {"gpt-4o": 85 + 170 * 6, "claude-sonnet-4-5": price_image(1920, 1080, "claude-sonnet-4-5").tokens}
    w, h = 1920, 1080
    scale = min(1.0, 1568 / max(w, h))
    assert expected["claude-sonnet-4-5"] <= 1600 and expected["claude-sonnet-4-5"] <= (w * scale) * (h * scale) / 750 + 1
    model = MODELS[fmt]
    assert price_image(1920, 1080, model).tokens == expected[model]
    path = CASES / "screenshot-pricing.json"
    from compaction import run_pipeline

    result = run_pipeline(path, recipe_for(case, output_format=fmt, model=model), format="anthropic")
    compiled = result.compiled
    assert result.summaries_per_level == {} and compiled.summaries == () and compiled.live_start == 0
    assert compiled.request.images_shown == 1
    assert expected[model] <= compiled.tokens <= expected[model] + 60
    assert compiled.tokens < count_text(data) / 2  # base64 priced as text would be thousands


# -- unknown-block-types ----------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_unknown_block_types(fmt: str) -> None:
    case = load_case("unknown-block-types")
    unknown = case["messages"][1]["content"][:2]
    store = store_of(case["messages"])
    try:
        stored = store.messages()[1]
        assert list(stored.content[:2]) == unknown, "stored verbatim"
        from compaction.tokens.counting import block_text_tokens

        assert all(block_text_tokens(b) > 0 for b in unknown), "priced above zero"
        assert store.facts()[1].text_tokens > count_text("The report says sales rose.") + 50
        compiled = compile_as(store, recipe_for(case), fmt)
        body = payload_json(compiled.request.payload)
        if fmt == "anthropic":
            assert body["messages"][1]["content"][:2] == unknown, "carried unchanged"
        else:
            content = body["messages"][1]["content"]
            assert "server_tool_use" in content and "web_search_tool_result" in content
            assert "not supported by this format" in content  # a loud text stand-in
        assert independent_tokens(body, MODELS[fmt]) <= compiled.tokens
    finally:
        store.close()


# -- url-image-text-only ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_url_image_text_only(fmt: str) -> None:
    case = load_case("url-image-text-only")
    url = case["messages"][0]["content"][1]["source"]["url"]
    store = store_of(case["messages"])
    try:
        hidden = compile_as(store, recipe_for(case), fmt)
        body = payload_json(hidden.request.payload)
        assert wire_images(body) == [] and url not in json.dumps([m for m in body["messages"] if "image_url" in json.dumps(m)])
        (found,) = placeholders_in(body)
        assert url in found.group("what") and "text-only" in found.group("reason")
        live = compile_as(store, recipe_for(case, vision=True), fmt)
        shipped = wire_images(payload_json(live.request.payload))
        assert [i.url for i in shipped] == [url]
        model = MODELS[fmt]
        cost = price_image(None, None, model)
        assert cost.estimated and cost.tokens == max_image_tokens(model)
        assert store.facts()[0].images[0].width is None  # unknown size: estimated
        assert cost.tokens <= live.tokens < cost.tokens + 60
    finally:
        store.close()


@FAMILY
@given(count=st.integers(1, 3), fmt=st.sampled_from(FORMATS), cap=st.integers(0, 3))
def test_url_image_family(count: int, fmt: str, cap: int) -> None:
    case = load_case("url-image-text-only")
    messages = copy.deepcopy(case["messages"])
    messages[0]["content"] = [messages[0]["content"][0]] + [
        {"type": "image", "source": {"type": "url", "url": f"https://example.com/c/{i}.png"}} for i in range(count)
    ]
    store = store_of(messages)
    try:
        hidden = compile_as(store, recipe_for(case), fmt)
        assert wire_images(payload_json(hidden.request.payload)) == []
        assert len(placeholders_in(payload_json(hidden.request.payload))) == count
        capped = compile_as(store, recipe_for(case, vision=True, max_live_images=cap, budget_tokens=20000), fmt)
        assert len(wire_images(payload_json(capped.request.payload))) == min(cap, count)
        # byte caps count a URL image at the assumed size, never 0 bytes
        by_bytes = compile_as(store, recipe_for(case, vision=True, max_live_image_bytes=10, budget_tokens=20000), fmt)
        assert wire_images(payload_json(by_bytes.request.payload)) == []
    finally:
        store.close()


# -- malformed-line --------------------------------------------------------------------------------------
def test_malformed_line() -> None:
    path = CASES / "malformed-line.jsonl"
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    assert caught.value.line == 3
    assert ":3" in str(caught.value) or "line 3" in str(caught.value)
    parsed = load_transcript(path, lenient=True)
    assert len(parsed.messages) == 3 and parsed.skipped == 1
    assert [m.role for m in parsed.messages] == ["user", "assistant", "assistant"]
    assert parsed.messages[-1].text() == "still here"


@FAMILY
@given(lines=st.integers(2, 8), data=st.data())
def test_malformed_line_family(tmp_path_factory: Any, lines: int, data: Any) -> None:
    bad = data.draw(st.integers(2, lines))  # a bad first line reads as a broken JSON document
    rows = []
    for i in range(1, lines + 1):
        role = "user" if i % 2 else "assistant"
        rows.append(f'{{"role": "{role}", "content": "bad \\q escape"}}' if i == bad else json.dumps({"role": role, "content": f"line {i}"}))
    path = tmp_path_factory.mktemp("jsonl") / "t.jsonl"
    path.write_text("\n".join(rows) + "\n", "utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path, format="openai")
    assert caught.value.line == bad
    parsed = load_transcript(path, format="openai", lenient=True)
    assert parsed.skipped == 1 and len(parsed.messages) == lines - 1
