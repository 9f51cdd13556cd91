"""The summarizer seam: what every summarizer declares, the registry, and the lazy HTTP client."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from compaction.compactor import compression_image_settings
from compaction.recipe import SUMMARIZER_KINDS, Recipe, SummarizerSettings
from compaction.summarizers import ExtractiveSummarizer, Summarizer
from compaction.summarizers.extractive import DEFAULT_SUMMARY_TOKENS
from compaction.summarizers.factory import SUMMARIZER_BUILDERS, summarizer_from_recipe
from compaction.wire import OutboundRequest, gate

KEY_ENV = "COMPACTION_TEST_SEAM_KEY"


def test_importing_compaction_does_not_import_the_http_client() -> None:
    code = (
        "import sys\n"
        "import compaction, compaction.summarizers, compaction.summarizers.factory, compaction.recipe\n"
        "from compaction.summarizers import ExtractiveSummarizer\n"
        "assert 'httpx' not in sys.modules, 'httpx imported by import compaction'\n"
        "from compaction.summarizers import AnthropicMessagesSummarizer\n"
        "assert 'httpx' in sys.modules\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_registry_covers_every_recipe_kind() -> None:
    assert tuple(SUMMARIZER_BUILDERS) == SUMMARIZER_KINDS


@pytest.mark.parametrize("kind, settings", [
    ("extractive", {}),
    ("openai", {"base_url": "http://127.0.0.1:9/v1", "model": "local-7b"}),
    ("anthropic", {"model": "claude-fake"}),
])
def test_every_summarizer_declares_its_format_model_and_cap(
    monkeypatch: pytest.MonkeyPatch, kind: str, settings: dict[str, Any]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    made: Summarizer = summarizer_from_recipe(Recipe(summarizer=SummarizerSettings(kind=kind, **settings)))
    try:
        assert made.request_format == {"extractive": "openai", "openai": "openai", "anthropic": "anthropic"}[kind]
        assert made.model == settings.get("model")
        assert made.max_output_tokens is None and isinstance(made.name, str)
    finally:
        made.close()


def _request(max_output_tokens: int | None) -> Any:
    messages = (
        ("user", ({"type": "text", "text": "Please fix the bug in src/app.py " + "and more " * 200},)),
        ("assistant", ({"type": "text", "text": "I'll read src/app.py first, because the trace points there."},)),
        ("user", ({"type": "text", "text": "Summarize."},)),
    )
    return gate(OutboundRequest("l1", "Record.", messages), compression_image_settings(Recipe()),
                format="openai", model="gpt-4o", max_output_tokens=max_output_tokens)


def test_the_extractive_summarizer_is_bounded_by_the_gated_cap() -> None:
    s = ExtractiveSummarizer()
    assert (s.request_format, s.model, s.max_output_tokens) == ("openai", None, None)
    s.close()  # a no-op, and harmless twice
    s.close()
    default = s.summarize(_request(None), kind="l1")
    assert default.text == s.summarize(_request(DEFAULT_SUMMARY_TOKENS), kind="l1").text
    small = s.summarize(_request(40), kind="l1")
    assert len(small.text) < len(default.text)
    assert small.text == s.summarize(_request(40), kind="l1").text  # deterministic
