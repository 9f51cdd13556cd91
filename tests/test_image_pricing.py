"""Image token prices from pixel sizes: the providers' worked examples and their properties."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compaction.errors import ImageError
from compaction.imageinfo import info_from_block, info_from_data_uri
from compaction.tokens import get_encoding
from compaction.tokens.image_pricing import (
    ImageCost,
    image_family,
    max_image_tokens,
    patch_multiplier,
    price_image,
    tile_rates,
)

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOT_CASE = ROOT / "tests" / "data" / "cases" / "screenshot-pricing.json"
AGENT_TARS = ROOT / "examples" / "agent-tars__browser__event-stream-with-many-images.json"

TILE_MODELS = ["gpt-4o", "gpt-4o-mini", "gpt-4.1", "o1", "o3", "gpt-5", "gpt-4-turbo"]
PATCH_MODELS = ["gpt-4.1-mini", "gpt-4.1-nano", "o4-mini", "gpt-5-mini", "gpt-5-nano"]
ALL_MODELS = TILE_MODELS + PATCH_MODELS + ["claude-sonnet-4-5", "gemini-2.5-flash"]

sides = st.integers(min_value=1, max_value=12_000)


# --- documented worked examples --------------------------------------------------------


@pytest.mark.parametrize(
    ("width", "height", "model", "detail", "tokens", "resized"),
    [
        # https://platform.openai.com/docs/guides/images-vision#calculating-costs
        (1024, 1024, "gpt-4o", "high", 765, (768, 768)),
        (2048, 4096, "gpt-4o", "high", 1105, (768, 1536)),
        (2048, 4096, "gpt-4o", "auto", 1105, (768, 1536)),
        (4096, 8192, "gpt-4o", "low", 85, (256, 512)),
        (1, 1, "gpt-4o", "low", 85, (1, 1)),
        (1920, 1080, "gpt-4o-2024-08-06", "high", 1105, (1365, 768)),
        (1024, 1024, "gpt-4o-mini", "high", 2833 + 4 * 5667, (768, 768)),
        (1024, 1024, "o1", "high", 75 + 4 * 150, (768, 768)),
        (1024, 1024, "gpt-5", "high", 70 + 4 * 140, (768, 768)),
        (512, 512, "gpt-4.1", "high", 85 + 170, (512, 512)),
        # patch models: 1024x1024 -> 1024 patches, 1800x2400 -> 1056x1408 -> 33 x 44 = 1452
        (1024, 1024, "gpt-4.1-mini", "auto", 1659, (1024, 1024)),  # ceil(1024 * 1.62)
        (1800, 2400, "gpt-4.1-mini", "auto", 2353, (1056, 1408)),  # ceil(1452 * 1.62)
        (1800, 2400, "gpt-4.1-nano", "auto", 3572, (1056, 1408)),  # ceil(1452 * 2.46)
        (1800, 2400, "o4-mini", "auto", 2498, (1056, 1408)),  # ceil(1452 * 1.72)
        # https://docs.claude.com/en/docs/build-with-claude/vision#evaluate-image-size
        (200, 200, "claude-sonnet-4-5", "auto", 54, (200, 200)),
        (1000, 1000, "claude-3-5-sonnet-20241022", "auto", 1334, (1000, 1000)),
        (1092, 1092, "claude-opus-4-1", "auto", 1590, (1092, 1092)),
        (784, 1568, "claude-haiku-4-5", "auto", 1599, (774, 1549)),  # 1.23 MP -> under 1.2 MP
        (4000, 1000, "claude-sonnet-4-5", "auto", 820, (1568, 392)),  # long edge binds
        # https://ai.google.dev/gemini-api/docs/image-understanding#token-calculation
        (384, 384, "gemini-2.0-flash", "auto", 258, (384, 384)),
        (960, 540, "gemini-2.5-flash", "auto", 6 * 258, (960, 540)),
        (1000, 1000, "models/gemini-2.5-pro", "auto", 4 * 258, (1000, 1000)),
    ],
)
def test_documented_examples(
    width: int, height: int, model: str, detail: str, tokens: int, resized: tuple[int, int]
) -> None:
    cost = price_image(width, height, model, detail)
    assert cost.tokens == tokens
    assert (cost.width, cost.height) == resized
    assert cost.estimated is False
    assert cost.family == image_family(model)


def test_tile_and_patch_tables() -> None:
    assert tile_rates("gpt-4o") == tile_rates("gpt-4.1") == tile_rates("unknown-model") == (85, 170)
    assert tile_rates("gpt-4o-mini-2024-07-18") == (2833, 5667)
    assert tile_rates("o1-pro") == tile_rates("o3") == (75, 150)
    assert tile_rates("gpt-5-chat-latest") == (70, 140)
    assert tile_rates("computer-use-preview") == (65, 129)
    assert patch_multiplier("gpt-4.1-mini-2025-04-14") == 1.62
    assert patch_multiplier("gpt-4.1-nano") == 2.46
    assert patch_multiplier("o4-mini") == 1.72
    assert patch_multiplier("gpt-4o") == 1.0


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("gpt-4o", "openai-tile"),
        ("gpt-4o-2024-05-13", "openai-tile"),
        ("gpt-4-turbo", "openai-tile"),
        ("gpt-4.1", "openai-tile"),
        ("o1", "openai-tile"),
        ("o3-2025-04-16", "openai-tile"),
        ("gpt-5", "openai-tile"),
        ("gpt-4.1-mini", "openai-patch"),
        ("openai/gpt-4.1-nano-2025-04-14", "openai-patch"),
        ("o4-mini", "openai-patch"),
        ("gpt-5-nano", "openai-patch"),
        ("claude-sonnet-4-5", "anthropic"),
        ("anthropic/Claude-3-Haiku", "anthropic"),
        ("gemini-2.5-flash", "gemini"),
        ("llama3.2-vision:11b", "openai-tile"),  # unknown names are priced like gpt-4o
        ("qwen2.5-vl", "openai-tile"),
    ],
)
def test_image_family(model: str, family: str) -> None:
    assert image_family(model) == family


def test_max_image_tokens() -> None:
    assert max_image_tokens("gpt-4o") == 85 + 8 * 170 == 1445
    assert max_image_tokens("gpt-4o-mini") == 2833 + 8 * 5667
    assert max_image_tokens("o3") == 75 + 8 * 150
    assert max_image_tokens("gpt-4.1-mini") == 2489  # ceil(1536 * 1.62)
    assert max_image_tokens("o4-mini") == 2642  # ceil(1536 * 1.72)
    assert max_image_tokens("claude-opus-4") == 1600
    assert max_image_tokens("gemini-2.5-flash") == 8 * 258


# --- unknown size ------------------------------------------------------------------------


@pytest.mark.parametrize("model", ALL_MODELS)
def test_unknown_size_charges_the_maximum_and_is_flagged(model: str) -> None:
    cost = price_image(None, None, model, "high")
    assert cost == ImageCost(max_image_tokens(model), True, image_family(model), None, None)


def test_unknown_size_at_low_detail_is_the_base() -> None:
    assert price_image(None, None, "gpt-4o", "low") == ImageCost(85, True, "openai-tile", None, None)


# --- bad inputs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((0, 10), "width must be > 0 pixels; found 0"),
        ((10, -3), "height must be > 0 pixels; found -3"),
        ((10.5, 10), "width must be an integer number of pixels or None; found 10.5"),
        ((True, 10), "width must be an integer number of pixels or None; found True"),
        ((10, None), "both be known or both be None"),
        ((10, 10, "gpt-4o", "medium"), "detail must be one of 'auto', 'low', 'high'; found 'medium'"),
        ((10, 10, ""), "model must be a non-empty string"),
    ],
)
def test_bad_inputs_name_the_argument(args: tuple[object, ...], fragment: str) -> None:
    with pytest.raises(ImageError) as caught:
        price_image(*args)  # type: ignore[arg-type]
    assert fragment in str(caught.value)


# --- properties ---------------------------------------------------------------------------


@given(sides, sides, st.sampled_from(ALL_MODELS), st.sampled_from(["auto", "low", "high"]))
def test_price_is_positive_and_never_above_the_maximum(w: int, h: int, model: str, detail: str) -> None:
    if image_family(model) == "gemini" and max(w, h) > 2 * min(w, h):
        w, h = max(w, h), (max(w, h) + 1) // 2  # the Gemini maximum assumes aspect <= 2:1
    cost = price_image(w, h, model, detail)
    assert 0 < cost.tokens <= max_image_tokens(model)
    assert cost.width is not None and cost.height is not None
    assert cost.width <= w and cost.height <= h  # providers only scale down


@given(sides, sides, st.sampled_from(TILE_MODELS))
def test_low_detail_never_costs_more_than_high(w: int, h: int, model: str) -> None:
    low = price_image(w, h, model, "low").tokens
    assert low == tile_rates(model)[0]
    assert low <= price_image(w, h, model, "high").tokens == price_image(w, h, model, "auto").tokens


@given(sides, sides, st.sampled_from(ALL_MODELS))
def test_low_detail_never_costs_more_than_high_for_any_family(w: int, h: int, model: str) -> None:
    assert price_image(w, h, model, "low").tokens <= price_image(w, h, model, "high").tokens


# Bigger is never cheaper -- within the range where the provider does not resize.  Past
# that, the documented formulas are *not* monotone in each side (see the next test), so the
# property there is stated for a uniformly scaled-up copy (OpenAI tiles) or as the cap.
@given(
    st.integers(1, 768),
    st.integers(1, 2048),
    st.integers(0, 600),
    st.integers(0, 600),
    st.sampled_from(TILE_MODELS),
)
def test_tile_bigger_never_cheaper_before_resize(w: int, h: int, dw: int, dh: int, model: str) -> None:
    w2, h2 = min(768, w + dw), min(2048, h + dh)
    assert price_image(w2, h2, model, "high").tokens >= price_image(w, h, model, "high").tokens


@given(sides, sides, st.integers(2, 8), st.sampled_from(TILE_MODELS))
def test_tile_scaled_up_copy_never_cheaper(w: int, h: int, k: int, model: str) -> None:
    assert price_image(w * k, h * k, model, "high").tokens >= price_image(w, h, model, "high").tokens


@given(
    st.integers(1, 1280),
    st.integers(1, 1280),
    st.integers(0, 400),
    st.integers(0, 400),
    st.sampled_from(PATCH_MODELS),
)
def test_patch_bigger_never_cheaper_before_the_cap(w: int, h: int, dw: int, dh: int, model: str) -> None:
    w2, h2 = w + dw, h + dh
    if -(-w2 // 32) * -(-h2 // 32) > 1536:
        w2, h2 = w, h
    assert price_image(w2, h2, model).tokens >= price_image(w, h, model).tokens


@given(st.integers(1, 1568), st.integers(1, 1568), st.integers(0, 500), st.integers(0, 500))
def test_anthropic_bigger_never_cheaper_before_resize(w: int, h: int, dw: int, dh: int) -> None:
    w2, h2 = min(1568, w + dw), min(1568, h + dh)
    if w2 * h2 > 1_200_000:
        w2, h2 = w, h
    small, big = price_image(w, h, "claude-sonnet-4-5"), price_image(w2, h2, "claude-sonnet-4-5")
    if w * h <= 1_200_000:
        assert big.tokens >= small.tokens


@given(sides, sides)
def test_anthropic_resized_images_land_at_the_cap(w: int, h: int) -> None:
    cost = price_image(w, h, "claude-sonnet-4-5")
    assert cost.width is not None and cost.height is not None
    assert max(cost.width, cost.height) <= 1568 and cost.width * cost.height <= 1_200_000
    if (cost.width, cost.height) != (w, h) and min(w, h) >= 100:
        # the resize keeps the aspect ratio and loses at most one pixel row/column to rounding
        assert cost.tokens >= price_image(cost.width - 1, cost.height - 1, "claude-sonnet-4-5").tokens


@given(st.integers(385, 3000), st.integers(0, 3000))
def test_gemini_longer_never_cheaper_at_a_fixed_short_side(short: int, extra: int) -> None:
    a = price_image(short + extra, short, "gemini-2.5-flash").tokens
    b = price_image(short + extra + 1, short, "gemini-2.5-flash").tokens
    assert 258 < a <= b
    assert price_image(min(short, 384), min(short, 384), "gemini-2.5-flash").tokens == 258


def test_documented_formulas_are_not_monotone_in_each_side() -> None:
    """Recorded so nobody 'fixes' it: a wider image can be cheaper after the provider's resize."""
    assert price_image(768, 1600, "gpt-4o", "high").tokens == 85 + 170 * 8  # 2 x 4 tiles, unscaled
    assert price_image(800, 1600, "gpt-4o", "high").tokens == 85 + 170 * 6  # -> 768x1536, 2 x 3 tiles
    assert (
        price_image(1000, 400, "gemini-2.5-flash").tokens > price_image(1000, 1000, "gemini-2.5-flash").tokens
    )


# --- the screenshot case ------------------------------------------------------------------


def test_screenshot_case_is_priced_from_pixels_not_base64() -> None:
    case = json.loads(SCREENSHOT_CASE.read_text(encoding="utf-8"))
    block = case["messages"][0]["content"][1]
    info = info_from_block(block)
    assert (info.media_type, info.width, info.height) == ("image/png", 1920, 1080)

    gpt = price_image(info.width, info.height, "gpt-4o", "high")
    # 1920x1080 -> fits 2048 -> short side 768: 1365x768 -> 3 x 2 tiles -> 85 + 6 * 170
    assert (gpt.width, gpt.height, gpt.tokens) == (1365, 768, 1105)

    claude = price_image(info.width, info.height, "claude-sonnet-4-5")
    # long edge 1920 > 1568, and 1920*1080/750 = 2765 > 1600: scale by sqrt(1.2 MP / 2.07 MP)
    # = 0.7607 -> 1460x821 -> ceil(1,198,660 / 750) = 1599
    assert (claude.width, claude.height, claude.tokens) == (1460, 821, 1599)

    as_text = len(get_encoding(case["settings"]["encoding"]).encode(block["source"]["data"]))
    assert as_text == 4602  # a 7.7 KB, mostly flat PNG: its base64 is short
    assert as_text > 4 * gpt.tokens and as_text > 2.5 * claude.tokens
    assert sum(price_image(1920, 1080, m).tokens for m in ("gpt-4o", "claude-sonnet-4-5")) < 3000 < as_text


def test_real_screenshots_price_orders_of_magnitude_below_their_base64() -> None:
    text = AGENT_TARS.read_text(encoding="utf-8")
    uri = max(re.findall(r"data:image/[a-z]+;base64,[A-Za-z0-9+/]+=*", text), key=len)
    info = info_from_data_uri(uri)
    assert (info.width, info.height) == (2560, 1600)
    as_text = len(get_encoding("o200k_base").encode(uri.split(",", 1)[1]))
    for model in ("gpt-4o", "claude-sonnet-4-5", "gpt-4.1-mini", "gemini-2.5-flash"):
        assert price_image(info.width, info.height, model).tokens * 50 < as_text
    assert price_image(info.width, info.height, "gpt-4o").tokens * 100 < as_text
