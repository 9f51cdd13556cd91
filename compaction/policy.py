"""Image policy and caps, decided newest first.

``image_policy = "live"`` ships images, subject to caps; ``"placeholders"`` (a text-only
model, recipe ``vision = false``) ships none: each image becomes a loud text placeholder.

Caps keep the newest images first: every decision depends only on images newer than the
one being decided.  :class:`ImageBudget` holds the caps' running totals; the compile planner
and the wire gate both reach it through :class:`compaction.images.ImageDecider`, with the
same depth (text tokens of the newer messages), so what is priced is what ships.

Captions.  With recipe ``caption_images = true``, :attr:`ImageSettings.captions` looks up
each replaced image's caption by sha256 (:class:`compaction.captions.StoreCaptions`), and
the decider puts it on the :class:`Decision`, so the planner prices and the gate ships the
same captioned placeholder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from .errors import RecipeError
from .types import IMAGE_POLICIES, ImagePolicy

if TYPE_CHECKING:
    from .recipe import Recipe
    from .store.model import Caption

__all__ = [
    "ImageSettings",
    "ImageBudget",
    "Decision",
    "CaptionLookup",
    "image_settings",
    "IMAGE_POLICIES",
    "ANTHROPIC_MAX_SIDE_PIXELS",
]


class CaptionLookup(Protocol):
    """Where the captions of images come from, by sha256 (a ``dict`` of :class:`Caption` is one)."""

    def get(self, sha256: str, /) -> Caption | None:
        """Return the caption row of the image ``sha256``, or ``None``."""
        ...


#: The longest side of an image Anthropic Messages takes (pixels): "If you submit an image
#: larger than 8000x8000 px, it will be rejected" (docs.anthropic.com, Vision, image size).
#: The API refuses the whole request, so a larger image ships as its placeholder.
ANTHROPIC_MAX_SIDE_PIXELS = 8000


@dataclass(frozen=True)
class ImageSettings:
    """The image policy and caps for one kind of outbound request.

    Attributes:
        policy: ``"live"`` or ``"placeholders"``.
        max_images: keep at most this many images (``None`` = unlimited, 0 = none).
        max_bytes: keep images while their total size stays within this many bytes.
        strip_depth_tokens: replace images whose message lies deeper than this many tokens
            from the newest message (``None`` = no depth cap).
        assumed_url_image_bytes: the size a URL image counts for under ``max_bytes`` (a URL
            image is never 0 bytes).
        captions: where a replaced image's caption is looked up (by sha256) to be shown in
            its placeholder; ``None``: no captions.  One lookup serves the planner and the
            gate of a request, so both see the same captions; it is not part of equality.
        max_side_pixels: the longest side (pixels) the request format takes; a larger image
            is replaced whatever the caps (``None`` = no limit; Anthropic Messages:
            :data:`ANTHROPIC_MAX_SIDE_PIXELS`).

    Raises:
        RecipeError: an unknown policy or a negative cap.
    """

    policy: ImagePolicy = "live"
    max_images: int | None = None
    max_bytes: int | None = None
    strip_depth_tokens: int | None = None
    assumed_url_image_bytes: int = 1_000_000
    captions: CaptionLookup | None = field(default=None, compare=False, repr=False)
    max_side_pixels: int | None = None

    def __post_init__(self) -> None:
        if self.policy not in IMAGE_POLICIES:
            raise RecipeError(f"image_policy must be 'live' or 'placeholders'; found {self.policy!r}")
        for name in ("max_images", "max_bytes", "strip_depth_tokens", "max_side_pixels"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise RecipeError(f"{name} must be a whole number >= 0 or None; found {value!r}")
        if (
            isinstance(self.assumed_url_image_bytes, bool)
            or not isinstance(self.assumed_url_image_bytes, int)
            or self.assumed_url_image_bytes <= 0
        ):
            raise RecipeError(f"assumed_url_image_bytes must be a whole number > 0; found {self.assumed_url_image_bytes!r}")


@dataclass(frozen=True)
class Decision:
    """Whether one image ships; ``reason`` says why not when it does not.

    ``caption``: the image's caption, shown in its placeholder (only on a replaced image).
    """

    keep: bool
    reason: str = ""
    caption: Caption | None = None


class ImageBudget:
    """Decide images newest first under :class:`ImageSettings`.

    Call :meth:`decide` for each image in reverse document order, giving the tokens of
    everything newer than the image's message (its depth).
    """

    def __init__(self, settings: ImageSettings) -> None:
        self.settings = settings
        self.kept = 0
        self.kept_bytes = 0

    def decide(self, byte_size: int | None, depth_tokens: int) -> Decision:
        """Return the decision for the next (older) image.

        Args:
            byte_size: decoded bytes, or ``None`` for a URL image (counted as the assumed size).
            depth_tokens: tokens of the messages newer than this image's message.
        """
        s = self.settings
        if s.policy == "placeholders":
            return Decision(False, "the model is text-only (image_policy = placeholders)")
        if s.strip_depth_tokens is not None and depth_tokens > s.strip_depth_tokens:
            return Decision(False, f"older than the image depth cap ({s.strip_depth_tokens} tokens)")
        if s.max_images is not None and self.kept >= s.max_images:
            return Decision(False, f"over the image count cap ({s.max_images} newest kept)")
        size = s.assumed_url_image_bytes if byte_size is None else byte_size
        if s.max_bytes is not None and self.kept_bytes + size > s.max_bytes:
            return Decision(False, f"over the image byte cap ({s.max_bytes} bytes)")
        self.kept += 1
        self.kept_bytes += size
        return Decision(True)


def image_settings(recipe: Recipe, requests: Literal["live", "compression"]) -> ImageSettings:
    """Return the image settings a recipe gives one kind of request.

    Args:
        recipe: the recipe (its ``vision`` gives the policy for both kinds).
        requests: ``"live"`` (compiled model requests: ``max_live_images``,
            ``max_live_image_bytes``, ``image_strip_depth_tokens``) or ``"compression"``
            (summarizer requests: ``max_compression_images``, ``max_compression_image_bytes``,
            no depth cap).
    """
    live = requests == "live"
    anthropic = recipe.output_format == "anthropic" if live else recipe.summarizer.kind == "anthropic"
    return ImageSettings(
        policy=recipe.image_policy,
        max_images=recipe.max_live_images if live else recipe.max_compression_images,
        max_bytes=recipe.max_live_image_bytes if live else recipe.max_compression_image_bytes,
        strip_depth_tokens=recipe.image_strip_depth_tokens if live else None,
        assumed_url_image_bytes=recipe.assumed_url_image_bytes,
        max_side_pixels=ANTHROPIC_MAX_SIDE_PIXELS if anthropic else None,
    )
