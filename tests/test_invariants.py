"""Property tests of the invariants of DESIGN.md on random histories crossed with random recipes.

Each example imports a generated history into a fresh store, compresses it with a capturing
summarizer (so every summarizer request's bytes are seen), and compiles a request in the
recipe's format.  The checks read the serialized bytes, the store and the raised error.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from request_checks import assert_coverage_pinning_system
from strategies import (
    CapturingSummarizer,
    b64_tolerant,
    check_tool_pairing,
    histories,
    independent_tokens,
    payload_json,
    placeholders_in,
    recipes,
    store_snapshot,
    wire_images,
)

from compaction import (
    Compactor,
    CompiledRequest,
    ImageError,
    Message,
    OverBudget,
    Recipe,
    Store,
    compile_request,
)
from compaction.planning import summary_header

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Outcome:
    store: Store
    recipe: Recipe
    summarizer: CapturingSummarizer
    compiled: CompiledRequest | None
    error: OverBudget | None

    @property
    def model(self) -> str:
        return self.recipe.target_model


def run(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> Outcome:
    """Import, compress (twice, the second time closing the tail if asked) and compile."""
    if recipe.output_format == "anthropic":
        recipe = recipe.replace(model="claude-sonnet-4-5")
    store = Store(":memory:")
    store.append(messages)
    summarizer = CapturingSummarizer()
    compactor = Compactor(store, recipe, summarizer)
    compactor.tick(keep_tail_tokens=keep_tail)
    compactor.tick(keep_tail_tokens=keep_tail // 2, close_tail=close_tail)
    event(f"summarizer requests: {min(len(summarizer.requests), 5)}{'+' if len(summarizer.requests) >= 5 else ''}")
    try:
        compiled = compile_request(store, recipe)
    except OverBudget as err:
        event(f"over budget ({err.stage})")
        return Outcome(store, recipe, summarizer, None, err)
    event(f"compiled with {'some' if compiled.summaries else 'no'} summaries")
    event(f"images shown: {min(compiled.request.images_shown, 2)}, replaced: {min(compiled.request.images_replaced, 2)}")
    return Outcome(store, recipe, summarizer, compiled, None)


cases = given(
    messages=histories(),
    recipe=recipes(),
    keep_tail=st.integers(min_value=0, max_value=3000),
    close_tail=st.booleans(),
)


def _over_budget_is_typed(outcome: Outcome) -> None:
    err = outcome.error
    assert err is not None
    assert err.budget == outcome.recipe.budget_tokens
    assert err.needed > err.budget
    assert err.stage
    assert str(err.budget) in str(err)


# (a) coverage ---------------------------------------------------------------------------------
@PROPERTY
@cases
def test_coverage(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    outcome = run(messages, recipe, keep_tail, close_tail)
    try:
        if outcome.compiled is None:
            _over_budget_is_typed(outcome)
            return
        compiled = outcome.compiled
        # summaries contiguous from 0 up to the live window; each message raw or under one
        # summary, a system message (pinned) raw wherever it stands
        assert_coverage_pinning_system(outcome.store, compiled)
        # the body carries each shown summary once
        text = compiled.request.payload.decode("utf-8")
        for summary in compiled.summaries:
            assert text.count(summary_header(summary)) == 1
    finally:
        outcome.store.close()


# (b) tool pairing -------------------------------------------------------------------------------
@PROPERTY
@cases
def test_tool_pairing_in_every_request(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    outcome = run(messages, recipe, keep_tail, close_tail)
    try:
        for _kind, payload in outcome.summarizer.requests:
            check_tool_pairing(payload_json(payload), "openai")
        if outcome.compiled is None:
            _over_budget_is_typed(outcome)
            return
        body = payload_json(outcome.compiled.request.payload)
        check_tool_pairing(body, outcome.recipe.output_format)
        if outcome.recipe.output_format == "anthropic":
            assert body["messages"][0]["role"] == "user"
            roles = [m["role"] for m in body["messages"]]
            assert all(a != b for a, b in zip(roles, roles[1:], strict=False)), "roles must alternate"
    finally:
        outcome.store.close()


# (c) budget ---------------------------------------------------------------------------------------
@PROPERTY
@cases
def test_budget_with_an_independent_count(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    outcome = run(messages, recipe, keep_tail, close_tail)
    try:
        if outcome.compiled is None:
            _over_budget_is_typed(outcome)
            return
        compiled = outcome.compiled
        budget = outcome.recipe.budget_tokens
        assert compiled.budget == budget
        assert compiled.tokens <= budget
        body = payload_json(compiled.request.payload)
        ours = independent_tokens(body, outcome.model)
        assert ours <= budget, f"independent count {ours} over the budget {budget} (engine said {compiled.tokens})"
    finally:
        outcome.store.close()


@PROPERTY
@given(messages=histories(max_turns=6), recipe=recipes())
def test_budget_at_the_exact_fit(messages: list[Message], recipe: Recipe) -> None:
    """A budget of exactly what the raw history needs: the shipped bytes must fit it too."""
    if recipe.output_format == "anthropic":
        recipe = recipe.replace(model="claude-sonnet-4-5")
    store = Store(":memory:")
    try:
        store.append(messages)
        roomy = compile_request(store, recipe, budget=10_000_000)
        try:
            exact = compile_request(store, recipe, budget=roomy.tokens)
        except OverBudget as err:  # the planner's estimate may exceed the exact count slightly
            assert err.budget == roomy.tokens and err.needed > err.budget
            return
        assert exact.request.payload == roomy.request.payload
        ours = independent_tokens(payload_json(exact.request.payload), recipe.target_model)
        assert ours <= roomy.tokens, f"independent count {ours} over the exact budget {roomy.tokens}"
        try:
            tighter = compile_request(store, recipe, budget=roomy.tokens - 1)
        except OverBudget as caught:
            assert caught.budget == roomy.tokens - 1
            assert caught.needed > caught.budget
        else:  # one token less fits only by masking an old tool output (there are no summaries)
            assert tighter.masked_seqs and not tighter.summaries
            assert tighter.tokens <= roomy.tokens - 1
    finally:
        store.close()


# (d) wire caps --------------------------------------------------------------------------------------
def _check_caps(body: dict[str, Any], *, vision: bool, max_images: int | None, max_bytes: int | None, url_bytes: int) -> int:
    images = wire_images(body)
    if not vision:
        assert images == [], "image inputs under placeholders"
    if max_images is not None:
        assert len(images) <= max_images
    if max_bytes is not None:
        assert sum(url_bytes if i.data is None else len(i.data) for i in images) <= max_bytes
    return len(images)


@PROPERTY
@cases
def test_wire_caps_in_every_request(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    outcome = run(messages, recipe, keep_tail, close_tail)
    r = outcome.recipe
    try:
        for _kind, payload in outcome.summarizer.requests:
            _check_caps(payload_json(payload), vision=r.vision, max_images=r.max_compression_images,
                        max_bytes=r.max_compression_image_bytes, url_bytes=r.assumed_url_image_bytes)
        if outcome.compiled is None:
            _over_budget_is_typed(outcome)
            return
        shipped = _check_caps(payload_json(outcome.compiled.request.payload), vision=r.vision,
                              max_images=r.max_live_images, max_bytes=r.max_live_image_bytes,
                              url_bytes=r.assumed_url_image_bytes)
        assert shipped == outcome.compiled.request.images_shown
    finally:
        outcome.store.close()


# (e) loud placeholders ------------------------------------------------------------------------------
@PROPERTY
@cases
def test_every_replaced_image_is_a_loud_placeholder(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    outcome = run(messages, recipe, keep_tail, close_tail)
    try:
        if outcome.compiled is None:
            _over_budget_is_typed(outcome)
            return
        request = outcome.compiled.request
        replaced = [r for r in request.replacements if r.kind == "image"]
        found = placeholders_in(payload_json(request.payload))
        reasons = sorted(m.group("reason") for m in found)
        # every replacement appears (summaries may quote older placeholders too)
        for replacement in replaced:
            assert replacement.reason
            assert replacement.reason in reasons
            reasons.remove(replacement.reason)
        for match in found:
            what, reason = match.group("what"), match.group("reason")
            assert reason.strip()
            assert "image/" in what or "URL https://" in what, what
        if not outcome.recipe.vision:
            assert all("text-only" in r.reason for r in replaced)
    finally:
        outcome.store.close()


# (f) store untouched, and live shows the images again -------------------------------------------------
@PROPERTY
@given(messages=histories(), recipe=recipes(), keep_tail=st.integers(min_value=0, max_value=1000))
def test_store_untouched_and_live_round_trip(messages: list[Message], recipe: Recipe, keep_tail: int) -> None:
    placeholders = recipe.replace(vision=False)
    store = Store(":memory:")
    try:
        store.append(messages)
        before = store_snapshot(store)
        Compactor(store, placeholders, CapturingSummarizer()).tick(keep_tail_tokens=keep_tail, close_tail=True)
        try:
            hidden = compile_request(store, placeholders)
            assert wire_images(payload_json(hidden.request.payload)) == []
        except OverBudget:
            pass
        assert store_snapshot(store) == before
        # under live with no caps and room for everything, every original image of a user turn
        # ships again (assistant turns and system messages carry no images in either API)
        live = recipe.replace(vision=True, max_live_images=None, max_live_image_bytes=None,
                              image_strip_depth_tokens=None, budget_tokens=10_000_000)
        shown = compile_request(store, live)
        assert shown.live_start == 0 and shown.summaries == ()
        shipped = wire_images(payload_json(shown.request.payload))
        expected_data: list[bytes] = []
        expected_urls: list[str] = []
        for message in messages:
            if message.role != "user":
                continue
            for block in _deep(message.content):
                if block.get("type") == "image":
                    source = block["source"]
                    if source["type"] == "base64":
                        expected_data.append(base64.b64decode(source["data"]))
                    else:
                        expected_urls.append(source["url"])
                for text in _texts(block):
                    for uri in _data_uris(text):
                        data = b64_tolerant(uri.split(",", 1)[1])
                        if data is not None and _readable(data):  # a cut URI is replaced, never shipped
                            expected_data.append(data)
        assert sorted(i.data for i in shipped if i.data is not None) == sorted(expected_data)
        assert sorted(i.url for i in shipped if i.url is not None) == sorted(expected_urls)
        assert store_snapshot(store) == before
    finally:
        store.close()


def _deep(blocks: Any) -> Any:
    for block in blocks:
        yield block
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            yield from _deep(block["content"])


def _texts(block: dict[str, Any]) -> list[str]:
    if block.get("type") == "text":
        return [block["text"]]
    if block.get("type") == "tool_result" and isinstance(block.get("content"), str):
        return [block["content"]]
    return []


def _readable(data: bytes) -> bool:
    from compaction.imageinfo import image_size

    try:
        image_size(data)
    except ImageError:
        return False
    return True


def _data_uris(text: str) -> list[str]:
    from strategies import DATA_URI

    return DATA_URI.findall(text)


# (g) determinism ------------------------------------------------------------------------------------
@PROPERTY
@cases
def test_determinism(messages: list[Message], recipe: Recipe, keep_tail: int, close_tail: bool) -> None:
    first = run(messages, recipe, keep_tail, close_tail)
    second = run(messages, recipe, keep_tail, close_tail)
    try:
        assert first.summarizer.requests == second.summarizer.requests
        if first.compiled is None:
            assert second.error is not None
            assert (second.error.stage, second.error.needed, str(second.error)) == (
                first.error.stage, first.error.needed, str(first.error))  # type: ignore[union-attr]
            return
        assert second.compiled is not None
        again = compile_request(first.store, first.recipe)
        assert again.request.payload == first.compiled.request.payload
        assert second.compiled.request.payload == first.compiled.request.payload
    finally:
        first.store.close()
        second.store.close()
