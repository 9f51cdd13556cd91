"""Price an image in tokens from its pixel size, by each provider's documented formula.

An image costs what the provider's vision encoder charges for it, which depends on its
pixel size after the provider's own resize, never on the length of its base64 text (a
1920x1080 screenshot is ~1,100 tokens to gpt-4o, while its base64 string tokenizes to
thousands or tens of thousands of text tokens).  Four families:

* ``"openai-tile"``: gpt-4o, gpt-4.1, gpt-4.5, gpt-4-turbo, gpt-5, o1, o3 and any model
  name this module does not recognise.  ``detail="low"`` costs the base tokens;
  ``"high"``/``"auto"`` scales the image to fit in 2048x2048, then so that its shortest
  side is 768 px (downscaling only), and charges ``base + per_tile * tiles`` for the
  512-px tiles that cover it.
* ``"openai-patch"``: gpt-4.1-mini, gpt-4.1-nano, o4-mini, gpt-5-mini, gpt-5-nano.  The
  image is covered by 32x32-px patches, scaled down to at most 1536 patches, and the
  patch count is multiplied by a per-model factor.
* ``"anthropic"``: every ``claude-*`` model.  An image whose long edge exceeds 1568 px or
  that would cost more than ~1600 tokens is scaled down (aspect ratio kept) until it
  fits; it then costs ``width * height / 750`` tokens.
* ``"gemini"``: every ``gemini-*`` model.  258 tokens when both sides are <= 384 px;
  otherwise the image is cut into crop units of ``floor(min(w, h) / 1.5)`` px, each
  scaled to a 768x768 tile of 258 tokens.

Sources (read when this module was written; each function names its own):
https://platform.openai.com/docs/guides/images-vision#calculating-costs,
https://docs.claude.com/en/docs/build-with-claude/vision#evaluate-image-size,
https://ai.google.dev/gemini-api/docs/image-understanding#token-calculation and
https://ai.google.dev/gemini-api/docs/tokens#multimodal-tokens.

A model's name is matched after dropping a provider prefix (``openai/gpt-4o``,
``models/gemini-2.5-flash``) and case-insensitively.

Example:
    >>> price_image(1024, 1024, "gpt-4o", "high").tokens
    765
    >>> price_image(1920, 1080, "claude-sonnet-4-5").tokens
    1599
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import ImageError

__all__ = [
    "ImageCost",
    "DETAILS",
    "FAMILIES",
    "image_family",
    "price_image",
    "max_image_tokens",
    "tile_rates",
    "patch_multiplier",
]

DETAILS = ("auto", "low", "high")
FAMILIES = ("openai-tile", "openai-patch", "anthropic", "gemini")

# --- OpenAI tile models -----------------------------------------------------------------
# (prefix, base tokens, tokens per 512-px tile), first match wins, so longer prefixes
# come first.  Figures from the "Images and vision" guide's cost table.
_TILE_RATES: tuple[tuple[str, int, int], ...] = (
    ("gpt-4o-mini", 2833, 5667),
    ("computer-use-preview", 65, 129),
    ("gpt-5", 70, 140),  # gpt-5, gpt-5-chat-latest (-mini/-nano are patch models)
    ("o1", 75, 150),
    ("o3", 75, 150),
)
_DEFAULT_TILE_RATE = (85, 170)  # gpt-4o, gpt-4.1, gpt-4.5, gpt-4-turbo, and unknown names
_TILE_FIT = 2048
_TILE_SHORT_SIDE = 768
_TILE = 512
_TILE_MAX_TILES = 8  # a 2048x768 (or 768x2048) image: 4 x 2 tiles

# --- OpenAI patch models ----------------------------------------------------------------
_PATCH_MULTIPLIERS: tuple[tuple[str, float], ...] = (
    ("gpt-4.1-mini", 1.62),
    ("gpt-4.1-nano", 2.46),
    ("gpt-5-mini", 1.62),
    ("gpt-5-nano", 2.46),
    ("o4-mini", 1.72),
)
_PATCH = 32
_PATCH_CAP = 1536

# --- Anthropic --------------------------------------------------------------------------
_CLAUDE_LONG_EDGE = 1568
_CLAUDE_PIXELS_PER_TOKEN = 750
_CLAUDE_MAX_TOKENS = 1600
_CLAUDE_MAX_PIXELS = _CLAUDE_MAX_TOKENS * _CLAUDE_PIXELS_PER_TOKEN  # 1.2 MP

# --- Gemini -----------------------------------------------------------------------------
_GEMINI_SMALL = 384
_GEMINI_TILE_TOKENS = 258
#: Tiles charged when the size is unknown: the documents give no maximum, so this assumes
#: a landscape or portrait image of aspect ratio up to 2:1 (16:9 screenshots included),
#: which the crop-unit rule cuts into at most 4 x 2 units (3 x 2 without the floor).
_GEMINI_ASSUMED_TILES = 8


@dataclass(frozen=True)
class ImageCost:
    """The token price of one image.

    Attributes:
        tokens: the input tokens the provider charges for the image.
        estimated: ``True`` when the pixel size was unknown and the model's maximum was
            charged instead.
        family: ``"openai-tile"``, ``"openai-patch"``, ``"anthropic"`` or ``"gemini"``.
        width: pixels after the provider's resize, when known.
        height: pixels after the provider's resize, when known.
    """

    tokens: int
    estimated: bool
    family: str
    width: int | None
    height: int | None


def _model_key(model: str) -> str:
    if not isinstance(model, str) or not model.strip():
        raise ImageError(f"model must be a non-empty string; found {model!r}")
    return model.strip().lower().rsplit("/", 1)[-1]


def _matches(key: str, prefix: str) -> bool:
    """Return whether ``key`` is ``prefix`` or ``prefix`` followed by a version suffix."""
    return key == prefix or key.startswith(prefix + "-") or key.startswith(prefix + ".")


def image_family(model: str) -> str:
    """Return the pricing family of ``model``.

    ``claude-*`` -> ``"anthropic"``; ``gemini-*`` -> ``"gemini"``; gpt-4.1-mini,
    gpt-4.1-nano, gpt-5-mini, gpt-5-nano and o4-mini (with any date suffix) ->
    ``"openai-patch"``; everything else, unknown names included, -> ``"openai-tile"``
    with gpt-4o's rates (85 + 170 per tile): a conservative default for the many
    OpenAI-compatible servers that speak the Chat API.

    Raises:
        ImageError: ``model`` is not a non-empty string.
    """
    key = _model_key(model)
    if key.startswith("claude"):
        return "anthropic"
    if key.startswith("gemini"):
        return "gemini"
    if any(_matches(key, prefix) for prefix, _ in _PATCH_MULTIPLIERS):
        return "openai-patch"
    return "openai-tile"


def tile_rates(model: str) -> tuple[int, int]:
    """Return ``(base_tokens, tokens_per_tile)`` of an OpenAI tile model.

    From the cost table of https://platform.openai.com/docs/guides/images-vision
    ("Calculating costs", tile-based models): gpt-4o / gpt-4.1 / gpt-4.5 85 + 170;
    gpt-4o-mini 2833 + 5667; o1 / o1-pro / o3 75 + 150; gpt-5 / gpt-5-chat-latest
    70 + 140 (the guide's figure; older notes that give gpt-5 gpt-4o's 85 + 170 are
    superseded); computer-use-preview 65 + 129.  Unknown names get gpt-4o's rates.
    """
    key = _model_key(model)
    for prefix, base, per_tile in _TILE_RATES:
        if _matches(key, prefix):
            return base, per_tile
    return _DEFAULT_TILE_RATE


def patch_multiplier(model: str) -> float:
    """Return the token multiplier of an OpenAI patch model (1.0 for any other name).

    From https://platform.openai.com/docs/guides/images-vision ("Calculating costs",
    patch-based models): gpt-4.1-mini and gpt-5-mini 1.62, gpt-4.1-nano and gpt-5-nano
    2.46, o4-mini 1.72.
    """
    key = _model_key(model)
    for prefix, multiplier in _PATCH_MULTIPLIERS:
        if _matches(key, prefix):
            return multiplier
    return 1.0


def _check_size(width: int | None, height: int | None) -> bool:
    """Validate the size arguments; return whether the size is known."""
    for name, value in (("width", width), ("height", height)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ImageError(f"{name} must be an integer number of pixels or None; found {value!r}")
        if value <= 0:
            raise ImageError(f"{name} must be > 0 pixels; found {value}")
    if (width is None) != (height is None):
        raise ImageError(
            f"width and height must both be known or both be None; found width={width!r}, height={height!r}"
        )
    return width is not None


def _check_detail(detail: str) -> str:
    if detail not in DETAILS:
        raise ImageError(f"detail must be one of {', '.join(map(repr, DETAILS))}; found {detail!r}")
    return detail


def _tile_resize(width: int, height: int) -> tuple[int, int]:
    """Scale to fit 2048x2048, then so the shortest side is 768 px; never upscale."""
    long_side = max(width, height)
    if long_side > _TILE_FIT:
        width = max(1, width * _TILE_FIT // long_side)
        height = max(1, height * _TILE_FIT // long_side)
    short_side = min(width, height)
    if short_side > _TILE_SHORT_SIDE:
        width = max(1, width * _TILE_SHORT_SIDE // short_side)
        height = max(1, height * _TILE_SHORT_SIDE // short_side)
    return width, height


def _price_tile(width: int, height: int, model: str, detail: str) -> tuple[int, int, int]:
    """Price an OpenAI tile-model image (https://platform.openai.com/docs/guides/images-vision).

    Worked examples from the guide (gpt-4o): 1024x1024 high -> 768x768 -> 4 tiles -> 765;
    2048x4096 high -> 1024x2048 -> 768x1536 -> 6 tiles -> 1105; any size low -> 85.
    """
    base, per_tile = tile_rates(model)
    if detail == "low":  # the model sees a version that fits 512x512
        long_side = max(width, height)
        if long_side > _TILE:
            width, height = max(1, width * _TILE // long_side), max(1, height * _TILE // long_side)
        return base, width, height
    width, height = _tile_resize(width, height)
    tiles = math.ceil(width / _TILE) * math.ceil(height / _TILE)
    return base + per_tile * tiles, width, height


def _patch_count(width: int, height: int) -> tuple[int, int, int]:
    """Return ``(patches, width, height)`` after the patch models' scale-down.

    The guide's algorithm: cover the image with 32-px patches; if more than 1536 are
    needed, shrink by ``r = sqrt(32**2 * 1536 / (w * h))``, then shrink further so the
    binding side is a whole number of patches.  Done in exact integer arithmetic after
    ``r`` so that the guide's 1800x2400 example gives 33 x 44 = 1452 patches, not 33 x 45.
    """
    raw = math.ceil(width / _PATCH) * math.ceil(height / _PATCH)
    if raw <= _PATCH_CAP:
        return raw, width, height
    shrink = math.sqrt(_PATCH * _PATCH * _PATCH_CAP / (width * height))
    cols_real = width * shrink / _PATCH
    rows_real = height * shrink / _PATCH
    cols, rows = math.floor(cols_real), math.floor(rows_real)
    if cols == 0 or rows == 0:  # a sliver: one patch across, the rest along
        return _PATCH_CAP, width, height
    if cols / cols_real <= rows / rows_real:  # width binds: it becomes `cols` whole patches
        new_w, new_h = cols * _PATCH, height * cols * _PATCH // width
        rows = -(-height * cols // width)
    else:
        new_w, new_h = width * rows * _PATCH // height, rows * _PATCH
        cols = -(-width * rows // height)
    return min(_PATCH_CAP, cols * rows), max(1, new_w), max(1, new_h)


def _price_patch(width: int, height: int, model: str) -> tuple[int, int, int]:
    """Price an OpenAI patch-model image (https://platform.openai.com/docs/guides/images-vision).

    ``ceil(patches * multiplier)``; documented patch counts: 1024x1024 -> 1024,
    1800x2400 -> 1452.  Rounded up: the bill may be one token lower.
    """
    patches, width, height = _patch_count(width, height)
    return math.ceil(patches * patch_multiplier(model) - 1e-9), width, height


def _claude_resize(width: int, height: int) -> tuple[int, int]:
    """Scale down, keeping the aspect ratio, to a long edge <= 1568 px and <= 1.2 MP."""
    long_side = max(width, height)
    scale = min(1.0, _CLAUDE_LONG_EDGE / long_side, math.sqrt(_CLAUDE_MAX_PIXELS / (width * height)))
    if scale >= 1.0:
        return width, height
    if scale == _CLAUDE_LONG_EDGE / long_side:  # exact integer path for the long-edge case
        return max(1, width * _CLAUDE_LONG_EDGE // long_side), max(1, height * _CLAUDE_LONG_EDGE // long_side)
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


def _price_anthropic(width: int, height: int) -> tuple[int, int, int]:
    """Price a Claude image (https://docs.claude.com/en/docs/build-with-claude/vision).

    "If your image's long edge is more than 1568 pixels, or your image is more than
    ~1,600 tokens, it will first be scaled down, preserving aspect ratio, until it's
    within the size limits", then ``tokens = (width px * height px) / 750``, rounded up.
    The ~1,600-token limit is taken as 1600 * 750 = 1.2 MP: the guide's own table keeps
    1092x1092 (1.19 MP, ~1590 tokens) unresized, so its "about 1.15 megapixels" is the
    recommended upload size, not the resize trigger.  Examples: 1000x1000 -> 1334;
    1092x1092 -> 1590; 1920x1080 -> 1460x821 -> 1599.
    """
    width, height = _claude_resize(width, height)
    return math.ceil(width * height / _CLAUDE_PIXELS_PER_TOKEN), width, height


def _price_gemini(width: int, height: int) -> tuple[int, int, int]:
    """Price a Gemini image (https://ai.google.dev/gemini-api/docs/image-understanding).

    Both sides <= 384 px -> 258 tokens.  Otherwise the crop unit is
    ``floor(min(w, h) / 1.5)`` px; the image is cut into ``ceil(w / unit) * ceil(h / unit)``
    units, each scaled to a 768x768 tile of 258 tokens.  The guide's example: 960x540 ->
    unit 360 -> 3 x 2 tiles -> 1548 tokens.  (Gemini 3's ``media_resolution`` setting is
    not modelled.)
    """
    if width <= _GEMINI_SMALL and height <= _GEMINI_SMALL:
        return _GEMINI_TILE_TOKENS, width, height
    unit = max(1, math.floor(min(width, height) / 1.5))
    tiles = math.ceil(width / unit) * math.ceil(height / unit)
    return _GEMINI_TILE_TOKENS * tiles, width, height


def max_image_tokens(model: str) -> int:
    """Return the most tokens one image can cost on ``model`` (high detail for OpenAI).

    This is the price of an image whose size cannot be known: a URL image, and an image
    reference (``{"source": {"type": "reference"}}``: ``blob:sha256:...``, an
    ``attachment://`` the log lacks, a file path), which the store keeps and prices at this
    maximum although it is only ever shown as a placeholder.  The maxima are the documented
    ones: Anthropic, https://docs.claude.com/en/docs/build-with-claude/vision#evaluate-image-size
    (an image over ~1,600 tokens is scaled down until it fits); OpenAI,
    https://platform.openai.com/docs/guides/images-vision#calculating-costs (an image is
    scaled to fit 2048x2048 and then to a 768-px short side, so at most 8 tiles; patch
    models cap an image at 1536 patches).

    * openai-tile: ``base + 8 * per_tile`` (a 2048x768 image after the resize covers
      4 x 2 tiles): 1445 for gpt-4o.
    * openai-patch: ``ceil(1536 * multiplier)``: 2489 for gpt-4.1-mini.
    * anthropic: 1600 (the ~1,600-token resize limit).
    * gemini: 2064, an assumption (the documents state no maximum): eight 258-token
      tiles, the most the crop-unit rule gives an image of aspect ratio up to 2:1.

    Raises:
        ImageError: ``model`` is not a non-empty string.
    """
    family = image_family(model)
    if family == "openai-tile":
        base, per_tile = tile_rates(model)
        return base + per_tile * _TILE_MAX_TILES
    if family == "openai-patch":
        return math.ceil(_PATCH_CAP * patch_multiplier(model) - 1e-9)
    if family == "anthropic":
        return _CLAUDE_MAX_TOKENS
    return _GEMINI_TILE_TOKENS * _GEMINI_ASSUMED_TILES


def price_image(
    width: int | None, height: int | None, model: str = "gpt-4o", detail: str = "auto"
) -> ImageCost:
    """Price one image in input tokens from its pixel size.

    Args:
        width: pixels, or ``None`` when unknown (a URL image, an unreadable header).
        height: pixels, or ``None`` when unknown (both or neither must be ``None``).
        model: the model name; its family picks the formula (see :func:`image_family`).
        detail: OpenAI's ``"auto"``, ``"low"`` or ``"high"``; ``"auto"`` is priced as
            ``"high"`` (the upper bound).  Other families ignore it.

    Returns:
        An :class:`ImageCost`.  When the size is unknown, ``tokens`` is
        :func:`max_image_tokens` (or the base tokens for OpenAI tile models at
        ``detail="low"``, which do not depend on size) and ``estimated`` is ``True``.

    Raises:
        ImageError: a size is not a positive integer, only one is ``None``, ``detail`` is
            not one of ``"auto"``, ``"low"``, ``"high"``, or ``model`` is empty.

    Example:
        >>> price_image(2048, 4096, "gpt-4o", "high")
        ImageCost(tokens=1105, estimated=False, family='openai-tile', width=768, height=1536)
    """
    known = _check_size(width, height)
    _check_detail(detail)
    family = image_family(model)
    if not known:
        if family == "openai-tile" and detail == "low":
            return ImageCost(tile_rates(model)[0], True, family, None, None)
        return ImageCost(max_image_tokens(model), True, family, None, None)
    assert width is not None and height is not None
    if family == "openai-tile":
        tokens, w, h = _price_tile(width, height, model, detail)
    elif family == "openai-patch":
        tokens, w, h = _price_patch(width, height, model)
    elif family == "anthropic":
        tokens, w, h = _price_anthropic(width, height)
    else:
        tokens, w, h = _price_gemini(width, height)
    return ImageCost(tokens, False, family, w, h)
