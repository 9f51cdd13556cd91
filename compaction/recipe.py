"""A strict recipe: the compaction settings, loaded from TOML and checked at load time.

A recipe fails loudly and early: an unknown key is named with the nearest valid one, a
value of the wrong type is refused (a string is not a boolean, an integer is not a
boolean, a boolean is not an integer), and every message starts with the file and the
key, for example ``recipe.toml: key 'vison': unknown; did you mean 'vision'?``.

Secrets never live in a recipe: ``[summarizer] api_key_env`` names the environment
variable that holds the key, and any value anywhere that looks like a key is refused
(without echoing it).

Example ``recipe.toml``::

    model = "claude-sonnet-4-5"
    budget_tokens = 120000
    vision = true
    max_live_images = 8

    [summarizer]
    kind = "openai"
    base_url = "http://localhost:11434/v1"
    model = "qwen2.5:7b"
    api_key_env = "OLLAMA_API_KEY"

Example:
    >>> recipe_from_mapping({"vision": False}).image_policy
    'placeholders'
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ._files import special_file_problem
from .credentials import CREDENTIAL_TOKENS
from .errors import InvalidArgument, RecipeError, found
from .model_names import model_name_problem, shown_model_name
from .outputs import REQUEST_FORMATS
from .prefill import ASSISTANT_PREFILL
from .types import IMAGE_POLICIES as _IMAGE_POLICIES
from .types import ImagePolicy, RequestFormatName

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "Recipe",
    "SummarizerSettings",
    "load_recipe",
    "recipe_from_mapping",
    "ENCODING_NAMES",
    "IMAGE_POLICIES",
    "OUTPUT_FORMATS",
    "SUMMARIZER_KINDS",
]

ENCODING_NAMES = ("o200k_base", "cl100k_base")
IMAGE_POLICIES: tuple[str, ...] = _IMAGE_POLICIES
OUTPUT_FORMATS: tuple[str, ...] = tuple(REQUEST_FORMATS)
#: The ``[summarizer] kind`` values (each has a builder in :mod:`compaction.summarizers.factory`).
SUMMARIZER_KINDS = ("extractive", "openai", "anthropic")

#: Values that look like credentials: OpenAI / Anthropic (``sk-...``), Google (``AIza...``),
#: GitHub, Slack, Hugging Face, AWS access keys, and ``Bearer`` headers.
_SECRET_PATTERNS = re.compile(rf"^(?:{CREDENTIAL_TOKENS}|Bearer\s+\S{{8,}})$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _looks_like_secret(value: str) -> bool:
    text = value.strip()
    if _SECRET_PATTERNS.match(text):
        return True
    # a long unbroken run of mixed letters and digits is a token, not a setting (model
    # names break into short dash-, dot- or slash-separated parts)
    longest = max((len(run) for run in re.findall(r"[A-Za-z0-9]+", text)), default=0)
    return (
        longest >= 24
        and re.fullmatch(r"[A-Za-z0-9_\-=+]+", text) is not None
        and re.search(r"[0-9]", text) is not None
        and re.search(r"[a-z]", text) is not None
        and re.search(r"[A-Z]", text) is not None
    )


def _describe(value: Any) -> str:
    """Name a value's TOML type and show it (shortened) for an error message."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"float {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"string {shown!r}"
    if isinstance(value, Mapping):
        return "table"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


class _Checker:
    """Checks field values; every message starts ``<source>: key '<prefix><name>': ``."""

    def __init__(self, source: str, prefix: str = "") -> None:
        self.source = source
        self.prefix = prefix

    def fail(self, name: str, message: str) -> RecipeError:
        return RecipeError(f"{self.source}: key '{self.prefix}{name}': {message}")

    def string(self, name: str, value: Any, *, optional: bool = False) -> None:
        if value is None and optional:
            return
        if not isinstance(value, str) or not value.strip():
            raise self.fail(name, f"expected a non-empty string, found {_describe(value)}")

    def choice(self, name: str, value: Any, choices: tuple[str, ...]) -> None:
        if not isinstance(value, str) or value not in choices:
            options = ", ".join(repr(c) for c in choices)
            hint = ""
            if isinstance(value, str):
                near = difflib.get_close_matches(value, choices, n=1)
                hint = f"; did you mean {near[0]!r}?" if near else ""
            raise self.fail(name, f"expected one of {options}, found {_describe(value)}{hint}")

    def boolean(self, name: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise self.fail(name, f"expected a boolean (true or false), found {_describe(value)}")

    def integer(self, name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
        if value is None and optional:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            absent = " (or leave it out for no limit)" if optional else ""
            raise self.fail(name, f"expected an integer >= {minimum}{absent}, found {_describe(value)}")

    def positive_number(self, name: str, value: Any) -> None:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value <= 0
        ):
            raise self.fail(name, f"expected a number > 0 (seconds), found {_describe(value)}")


@dataclass(frozen=True)
class SummarizerSettings:
    """The ``[summarizer]`` table: which summarizer writes the summaries.

    Attributes:
        kind: ``"extractive"`` (offline, the default), ``"openai"`` (any
            OpenAI-compatible Chat Completions server) or ``"anthropic"`` (the Anthropic
            Messages API).
        base_url: the server's base URL (``http://`` or ``https://``); ``None`` for the
            summarizer's default (``https://api.anthropic.com`` for ``"anthropic"``;
            ``"openai"`` requires one).
        model: the model the server should run; required when ``kind`` is ``"openai"`` or
            ``"anthropic"``.
        api_key_env: the NAME of the environment variable holding the API key, never the
            key itself; ``None`` sends no key (local servers), except for ``"anthropic"``,
            which then reads ``ANTHROPIC_API_KEY``.
        timeout_seconds: the bound of each attempt of a request, whole: connecting,
            sending, the headers and the body (seconds, > 0).
        max_output_tokens: the summary's output cap (tokens); ``None`` uses the recipe's
            ``summary_max_tokens``.
        max_retries: retries on transient errors (timeouts, 429, 5xx).
    """

    kind: str = "extractive"
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout_seconds: float = 60.0
    max_output_tokens: int | None = None
    max_retries: int = 3
    source: str = field(default="<summarizer>", repr=False, compare=False)

    def __post_init__(self) -> None:
        check = _Checker(self.source, "summarizer.")
        check.choice("kind", self.kind, SUMMARIZER_KINDS)
        check.string("base_url", self.base_url, optional=True)
        if self.base_url is not None and not re.match(r"^https?://[^\s/]+", self.base_url):
            raise check.fail(
                "base_url", f"expected an http:// or https:// URL, found {_describe(self.base_url)}"
            )
        check.string("model", self.model, optional=True)
        if self.model is not None and (problem := model_name_problem(self.model)):
            raise check.fail("model", f"expected a model name, found {shown_model_name(self.model)}: {problem}")
        if self.kind in ("openai", "anthropic") and self.model is None:
            raise check.fail(
                "model", f"required when summarizer.kind = {self.kind!r} (the model the server runs)"
            )
        check.string("api_key_env", self.api_key_env, optional=True)
        if self.api_key_env is not None and not _ENV_NAME.match(self.api_key_env):
            raise check.fail(
                "api_key_env",
                f"expected the name of an environment variable (letters, digits, _), "
                f"found {_describe(self.api_key_env)}",
            )
        check.positive_number("timeout_seconds", self.timeout_seconds)
        check.integer("max_output_tokens", self.max_output_tokens, minimum=1, optional=True)
        check.integer("max_retries", self.max_retries, minimum=0)

    def api_key(self) -> str | None:
        """Return the API key from the environment variable named by ``api_key_env``.

        Raises:
            RecipeError: ``api_key_env`` is set but the variable is missing or empty, or holds
                a character no API key has (a trailing CR or LF, a control or non-ASCII
                character); the message names the variable, never the key.
        """
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise RecipeError(
                f"{self.source}: key 'summarizer.api_key_env': environment variable "
                f"{self.api_key_env} is not set; export it or remove api_key_env"
            )
        from .summarizers._secrets import bad_key_message, key_problem

        problem = key_problem(value)
        if problem:
            raise RecipeError(
                f"{self.source}: key 'summarizer.api_key_env': {bad_key_message(self.api_key_env, problem)}"
            )
        return value

    def to_dict(self) -> dict[str, Any]:
        """Return the settings as a TOML-ready mapping (``None`` values left out)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if f.name != "source" and getattr(self, f.name) is not None
        }


@dataclass(frozen=True)
class Recipe:
    """Every compaction setting, validated on construction.

    Attributes:
        encoding: the encoding for text counts: ``"o200k_base"``, ``"cl100k_base"``, or
            ``"hf:/path/to/tokenizer.json"`` for a local model (a Hugging Face tokenizer file,
            counted with the ``tokenizers`` library; never downloaded).
        model: the target model named in compiled requests; picks the image pricing family.
            ``None``: the output format's default model (see :attr:`target_model`).
        budget_tokens: the token budget of a compiled request; ``None`` when the caller
            passes it at compile time.
        vision: whether the target model sees images; ``False`` ships every image as a
            text placeholder (``image_policy == "placeholders"``).
        max_live_images: most images shipped in one request (``None``: no limit).
        image_strip_depth_tokens: images older than this many tokens from the newest
            message become placeholders (``None``: no depth limit).
        max_live_image_bytes: most image bytes shipped in one live request.
        max_compression_image_bytes: most image bytes in one summarizer request.
        max_compression_images: most images in one summarizer request.
        assumed_url_image_bytes: bytes charged against byte caps for a URL image whose
            size is unknown.
        chunk_target_tokens: tokens at which a chunk closes.
        chunk_min_messages: fewest messages in a chunk.
        merge_fanout: summaries of one level merged into one of the next.
        summary_max_tokens: the output cap of one summary (tokens).
        summarizer_context_tokens: the summarizer model's context window (tokens).
        output_format: the request format compile produces: ``"openai"`` or ``"anthropic"``.
        assistant_prefill: what compile does when the request would end on an assistant turn
            (the store's newest message is the assistant's), which a model reads as a prefill
            and Claude 4.6 and later refuse: ``"auto"`` refuses it for the models known to
            refuse it, ``"allow"`` always ships it, ``"refuse"`` never does; refused, compile
            raises :class:`~compaction.errors.AssistantPrefillRefused` (never invents a user
            turn, see :mod:`compaction.prefill`).
        low_water_ratio: a compaction event compacts the request down to this share of the
            budget, so that the following turns append to a stable prefix (0.05 to 1).
            Default 0.7: measured at 32k on the pi, aider and OpenHands transcripts, it keeps
            the cached share at 0.91 or more and probe recall closest to re-planning every
            turn (0.6 kept fewer decisions on aider; 0.8 fell below 0.90 cached there).
        high_water_tokens: a compaction event happens when the next request would exceed
            this many tokens (``None``: the budget).
        cache_breakpoints: mark the stable prefix for prompt caches (Anthropic
            ``cache_control`` on the system text or tools, the summary stack and the newest
            message).
        prompt_cache_key: OpenAI's ``prompt_cache_key`` sent with compiled requests (never
            with summarizer requests); ``None`` sends none.
        ask_ledger: carry every human ask verbatim (up to ``ask_cap_tokens`` each) in a
            stable section ahead of the summaries, whether or not its turn is summarized.
        ledger_share: the most of the budget the ask ledger may take (0.01 to 0.9); past
            it the oldest asks are shortened, loudly.
        ask_cap_tokens: the most tokens one ask shows in the ledger when the ledger is
            short of room; a longer ask shows its head and tail around a loud cut marker.
            With room to spare an ask may show up to an eighth of the ledger's share
            (``compaction.ledger.ASK_ROOM_SHARE``), never less than this.
        observation_masking: before summarizing, show old tool outputs as short loud
            placeholders (the calls and the assistant's text stay raw).
        mask_keep_rounds: the newest tool rounds whose outputs are never masked (at least
            1); older outputs are masked only as far as the budget needs.
        never_mask: tool names whose outputs are never masked (``["Read"]``).
        summary_focus: an instruction for what summaries should keep (``compaction
            compress --focus``); ``None`` for none.
        quarantine_after: ticks on which a chunk's summarizer requests may fail before the
            chunk is quarantined (shown raw or masked, not retried, reported).
        caption_images: caption each image once while it is live (a vision-capable
            summarizer is required) and show the caption in its later placeholder.
        chat_template: the chat template whose per-message framing an ``hf:`` encoding counts:
            ``"llama3"``, ``"chatml"``, ``"mistral"`` or ``"none"`` (``None``: detected from the
            tokenizer's special tokens); only with an ``hf:`` encoding, whose name then carries
            it (``hf:PATH#chatml``, see :mod:`compaction.tokens.hf`).
        calibrate: apply the correction fitted from the provider's reported usage of the
            target model when the store has one (:mod:`compaction.calibration`): a provider
            that counts more than we do gets a budget of ``floor(budget / correction)``.
        calibrate_raise_budget: let a correction below 1 (we over-count) raise the budget
            above the one given; off by default, so the budget is never exceeded on a stale fit.
        summarizer: the ``[summarizer]`` table.
        source: where the recipe came from (a path, ``"<mapping>"``), used in errors.
    """

    encoding: str = "o200k_base"
    model: str | None = None
    budget_tokens: int | None = None
    vision: bool = True
    max_live_images: int | None = None
    image_strip_depth_tokens: int | None = None
    max_live_image_bytes: int | None = None
    max_compression_image_bytes: int | None = None
    max_compression_images: int | None = None
    assumed_url_image_bytes: int = 1_000_000
    chunk_target_tokens: int = 4000
    chunk_min_messages: int = 4
    merge_fanout: int = 6
    summary_max_tokens: int = 400
    summarizer_context_tokens: int = 8000
    output_format: RequestFormatName = "openai"
    assistant_prefill: str = "auto"
    low_water_ratio: float = 0.7
    high_water_tokens: int | None = None
    cache_breakpoints: bool = True
    prompt_cache_key: str | None = None
    ask_ledger: bool = True
    ledger_share: float = 0.25
    ask_cap_tokens: int = 600
    observation_masking: bool = True
    mask_keep_rounds: int = 3
    never_mask: tuple[str, ...] = ()
    summary_focus: str | None = None
    quarantine_after: int = 3
    caption_images: bool = False
    chat_template: str | None = None
    calibrate: bool = True
    calibrate_raise_budget: bool = False
    summarizer: SummarizerSettings = field(default_factory=SummarizerSettings)
    source: str = field(default="<defaults>", repr=False, compare=False)

    def __post_init__(self) -> None:
        check = _Checker(self.source)
        self._check_encoding(check)
        check.string("model", self.model, optional=True)
        if self.model is not None and (problem := model_name_problem(self.model)):
            raise check.fail("model", f"expected a model name, found {shown_model_name(self.model)}: {problem}")
        check.integer("budget_tokens", self.budget_tokens, minimum=1, optional=True)
        check.boolean("vision", self.vision)
        for name in (
            "max_live_images",
            "image_strip_depth_tokens",
            "max_live_image_bytes",
            "max_compression_image_bytes",
            "max_compression_images",
        ):
            check.integer(name, getattr(self, name), minimum=0, optional=True)
        check.integer("assumed_url_image_bytes", self.assumed_url_image_bytes, minimum=1)
        check.integer("chunk_target_tokens", self.chunk_target_tokens, minimum=1)
        check.integer("chunk_min_messages", self.chunk_min_messages, minimum=1)
        check.integer("merge_fanout", self.merge_fanout, minimum=2)
        check.integer("summary_max_tokens", self.summary_max_tokens, minimum=1)
        check.integer("summarizer_context_tokens", self.summarizer_context_tokens, minimum=1)
        if self.summary_max_tokens >= self.summarizer_context_tokens:
            raise check.fail(
                "summary_max_tokens",
                f"{self.summary_max_tokens} must be below summarizer_context_tokens "
                f"({self.summarizer_context_tokens}): the summary has to fit the summarizer's window",
            )
        check.choice("output_format", self.output_format, OUTPUT_FORMATS)
        check.choice("assistant_prefill", self.assistant_prefill, ASSISTANT_PREFILL)
        if (
            isinstance(self.low_water_ratio, bool)
            or not isinstance(self.low_water_ratio, (int, float))
            or not 0.05 <= self.low_water_ratio <= 1
        ):
            raise check.fail(
                "low_water_ratio", f"expected a number from 0.05 to 1 (a share of the budget), found {_describe(self.low_water_ratio)}"
            )
        check.integer("high_water_tokens", self.high_water_tokens, minimum=1, optional=True)
        check.boolean("cache_breakpoints", self.cache_breakpoints)
        check.string("prompt_cache_key", self.prompt_cache_key, optional=True)
        check.boolean("ask_ledger", self.ask_ledger)
        if (
            isinstance(self.ledger_share, bool)
            or not isinstance(self.ledger_share, (int, float))
            or not 0.01 <= self.ledger_share <= 0.9
        ):
            raise check.fail(
                "ledger_share", f"expected a number from 0.01 to 0.9 (a share of the budget), found {_describe(self.ledger_share)}"
            )
        check.integer("ask_cap_tokens", self.ask_cap_tokens, minimum=16)
        check.boolean("observation_masking", self.observation_masking)
        check.integer("mask_keep_rounds", self.mask_keep_rounds, minimum=1)
        if isinstance(self.never_mask, list):
            object.__setattr__(self, "never_mask", tuple(self.never_mask))
        if not isinstance(self.never_mask, tuple) or not all(isinstance(n, str) and n.strip() for n in self.never_mask):
            raise check.fail("never_mask", f"expected an array of tool names, found {_describe(self.never_mask)}")
        check.string("summary_focus", self.summary_focus, optional=True)
        check.integer("quarantine_after", self.quarantine_after, minimum=1)
        check.boolean("caption_images", self.caption_images)
        check.boolean("calibrate", self.calibrate)
        check.boolean("calibrate_raise_budget", self.calibrate_raise_budget)
        if not isinstance(self.summarizer, SummarizerSettings):
            raise check.fail("summarizer", f"expected a table, found {_describe(self.summarizer)}")

    @property
    def image_policy(self) -> ImagePolicy:
        """Return ``"live"`` when the model sees images, else ``"placeholders"``."""
        return "live" if self.vision else "placeholders"

    def _check_encoding(self, check: _Checker) -> None:
        """Check ``encoding`` and ``chat_template``; an ``hf:`` name takes the template as its suffix."""
        if not (isinstance(self.encoding, str) and self.encoding.startswith("hf:")):
            check.choice("encoding", self.encoding, ENCODING_NAMES)
            if self.chat_template is not None:
                raise check.fail(
                    "chat_template",
                    f"applies only to an hf: encoding (a local model's tokenizer.json), not to {self.encoding!r}",
                )
            return
        from .tokens.chat_templates import CHAT_TEMPLATE_NAMES
        from .tokens.hf import TokenizerFileError, hf_encoding, load_tokenizer

        if self.chat_template is not None:
            check.choice("chat_template", self.chat_template, CHAT_TEMPLATE_NAMES)
        try:
            encoding = hf_encoding(self.encoding, self.chat_template)
            load_tokenizer(encoding)
        except TokenizerFileError as err:
            raise check.fail("encoding", str(err)) from err
        object.__setattr__(self, "encoding", encoding)

    @property
    def target_model(self) -> str:
        """Return the model compiled requests name: :attr:`model`, else the output format's default
        (``gpt-4o`` for OpenAI Chat, ``claude-sonnet-4-5`` for Anthropic Messages)."""
        return self.model or REQUEST_FORMATS[self.output_format].default_model

    def to_dict(self) -> dict[str, Any]:
        """Return the recipe as a TOML-ready mapping (``None`` values left out).

        ``recipe_from_mapping(recipe.to_dict()) == recipe`` holds for every recipe.
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "source" or value is None:
                continue
            if isinstance(value, tuple):
                value = list(value)
            out[f.name] = value.to_dict() if isinstance(value, SummarizerSettings) else value
        return out

    def replace(self, **overrides: Any) -> Recipe:
        """Return a copy with ``overrides`` applied, validated like a loaded recipe.

        Keys are recipe keys (``image_policy`` included); ``summarizer`` takes a mapping
        of ``[summarizer]`` keys, merged onto the current table, or a
        :class:`SummarizerSettings`.  ``None`` clears an optional limit.

        Raises:
            RecipeError: an unknown key, a wrong type, or a conflict (the message names
                the key, and the recipe file with "(with overrides)", or ``<replace>``).

        Example:
            >>> Recipe().replace(max_live_images=2).max_live_images
            2
        """
        data = self.to_dict()
        summarizer = overrides.pop("summarizer", None)
        if "image_policy" in overrides and "vision" not in overrides:
            data.pop("vision", None)
        if isinstance(summarizer, SummarizerSettings):
            data["summarizer"] = summarizer.to_dict()
        elif isinstance(summarizer, Mapping):
            data["summarizer"] = {**data["summarizer"], **summarizer}
        elif summarizer is not None:
            raise RecipeError(
                f"<replace>: key 'summarizer': expected a table or SummarizerSettings, "
                f"found {_describe(summarizer)}"
            )
        data.update(overrides)
        # Errors keep naming the recipe file the other keys came from.
        source = "<replace>" if self.source.startswith("<") else f"{self.source} (with overrides)"
        return recipe_from_mapping(data, source=source)


_RECIPE_KEYS = tuple(f.name for f in fields(Recipe) if f.name != "source") + ("image_policy",)
_SUMMARIZER_KEYS = tuple(f.name for f in fields(SummarizerSettings) if f.name != "source")
_OPTIONAL_RECIPE_KEYS = frozenset(f.name for f in fields(Recipe) if f.default is None) | {"image_policy"}
_OPTIONAL_SUMMARIZER_KEYS = frozenset(f.name for f in fields(SummarizerSettings) if f.default is None)


def _unknown(source: str, key: str, valid: tuple[str, ...], prefix: str = "") -> RecipeError:
    near = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    message = f"{source}: key '{prefix}{key}': unknown"
    if near:
        message += f"; did you mean '{prefix}{near[0]}'?"
    else:
        message += f"; valid keys are {', '.join(prefix + k for k in sorted(valid))}"
    if re.search(r"(?i)(api_?key|secret|token|password)$", key) and "api_key_env" in valid:
        message += (
            " (a recipe never holds a key: set api_key_env to the NAME of the environment "
            "variable that holds it)"
        )
    return RecipeError(message)


def _refuse_secrets(source: str, data: Mapping[str, Any], prefix: str = "") -> None:
    for key, value in data.items():
        if isinstance(value, Mapping):
            _refuse_secrets(source, value, f"{prefix}{key}.")
        elif isinstance(value, str) and _looks_like_secret(value):
            raise RecipeError(
                f"{source}: key '{prefix}{key}': the value looks like an API key or token "
                f"(not shown); never put a key in a recipe: export it in an environment "
                f"variable and set summarizer.api_key_env to that variable's name"
            )


def _check_keys(
    source: str, data: Mapping[str, Any], valid: tuple[str, ...], optional: frozenset[str], prefix: str = ""
) -> None:
    for key in data:
        if not isinstance(key, str):
            raise RecipeError(f"{source}: key {key!r}: keys must be strings")
        if key not in valid:
            raise _unknown(source, key, valid, prefix)
        if data[key] is None and key not in optional:
            raise RecipeError(f"{source}: key '{prefix}{key}': a value is required (None is not allowed)")


def recipe_from_mapping(data: Mapping[str, Any], source: str = "<mapping>") -> Recipe:
    """Build a :class:`Recipe` from a mapping (a parsed TOML document), strictly.

    Args:
        data: recipe keys at the top level and an optional ``summarizer`` table.
        source: the file or origin named in error messages.

    Returns:
        The validated :class:`Recipe` (absent keys take their defaults).

    Raises:
        RecipeError: an unknown key (with the nearest valid name), a wrong type or value,
            ``vision`` conflicting with ``image_policy``, or a value that looks like an
            API key; the message starts with ``source`` and names the key.
    """
    if not isinstance(data, Mapping):
        raise RecipeError(f"{source}: a recipe must be a table of keys; found {_describe(data)}")
    _refuse_secrets(source, data)
    _check_keys(source, data, _RECIPE_KEYS, _OPTIONAL_RECIPE_KEYS)
    values = dict(data)

    policy = values.pop("image_policy", None)
    if policy is not None:
        _Checker(source).choice("image_policy", policy, IMAGE_POLICIES)
        wanted = policy == "live"
        if "vision" in values and values["vision"] is not wanted:
            _Checker(source).boolean("vision", values["vision"])
            raise RecipeError(
                f"{source}: key 'image_policy': {policy!r} conflicts with vision = "
                f"{str(values['vision']).lower()}; set only one of them (vision = false means "
                f"image_policy = 'placeholders')"
            )
        values["vision"] = wanted

    table = values.pop("summarizer", None)
    if table is None:
        summarizer = SummarizerSettings(source=source)
    elif isinstance(table, SummarizerSettings):
        summarizer = dataclasses.replace(table, source=source)
    elif isinstance(table, Mapping):
        _check_keys(source, table, _SUMMARIZER_KEYS, _OPTIONAL_SUMMARIZER_KEYS, "summarizer.")
        summarizer = SummarizerSettings(**table, source=source)
    else:
        raise RecipeError(
            f"{source}: key 'summarizer': expected a table ([summarizer]), found {_describe(table)}"
        )
    return Recipe(**values, summarizer=summarizer, source=source)


def load_recipe(path: str | os.PathLike[str]) -> Recipe:
    """Load and validate a TOML recipe file.

    Args:
        path: the recipe file (UTF-8 TOML).

    Returns:
        The validated :class:`Recipe`.

    Raises:
        RecipeError: the file cannot be read, is not valid TOML (the message gives the
            parser's line and column), or fails a check of :func:`recipe_from_mapping`.
        InvalidArgument: ``path`` is not a path.

    Example:
        >>> load_recipe("recipe.toml")  # doctest: +SKIP
        Recipe(encoding='o200k_base', model='gpt-4o', ...)
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgument(f"path must be a recipe file's path (str or Path); found {found(path)}")
    source = os.fspath(path)
    if not isinstance(source, str):
        raise InvalidArgument(f"path must be a text path, not bytes; found {found(path)}")
    special = special_file_problem(source, "a recipe")
    if special is not None:  # /dev/zero or a pipe: read to an end that never comes
        raise RecipeError(special)
    try:
        with open(source, "rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as err:
        raise RecipeError(f"{source}: invalid TOML: {err}") from err
    except UnicodeDecodeError as err:
        raise RecipeError(f"{source}: invalid TOML: the file is not UTF-8 ({err.reason})") from err
    except OSError as err:
        raise RecipeError(f"{source}: cannot read the recipe: {err.strerror or err}") from err
    return recipe_from_mapping(data, source=source)
