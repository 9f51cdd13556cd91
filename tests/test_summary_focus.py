# ruff: noqa: F811  (the imported fake server fixtures are taken as arguments)
"""The summary prompts: every section asked for, and a focus that reaches the bytes sent.

The prompts are gated and sent by the real HTTP summarizers to the loopback fake servers;
the assertions read the body the server captured.  The command line's ``--focus`` is
followed to the summarizer the pipeline builds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import runner
from fake_anthropic_server import FakeAnthropic, fake_anthropic  # noqa: F401
from fake_openai_server import FakeOpenAI, fake_openai  # noqa: F401

import compaction.cli
import compaction.pipeline
from compaction.cli import main
from compaction.compactor import compression_image_settings
from compaction.errors import RecipeError
from compaction.recipe import Recipe
from compaction.summarizers import ExtractiveSummarizer
from compaction.summarizers._focus import MAX_FOCUS_CHARS, focus_text
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.base import SUMMARY_HEADINGS, Summarizer, l1_system_prompt, merge_system_prompt
from compaction.summarizers.openai_chat import OpenAIChatSummarizer
from compaction.wire import OutboundRequest, gate

ROOT = Path(__file__).resolve().parent.parent
PI = ROOT / "examples" / "pi__pi-mono__before-compaction.jsonl"
KEY_ENV = "COMPACTION_TEST_FOCUS_KEY"
SECRET = "sk-fake-" + "Qm7pR2" * 6
MODEL = "fake-summarizer-7b"
FOCUS = "the database migration and its rollback plan"


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, SECRET)
    return SECRET


def _system_text(body: dict[str, Any], fmt: str) -> str:
    if fmt == "anthropic":
        system = body["system"]
        return system if isinstance(system, str) else "".join(b["text"] for b in system)
    (first, *_rest) = body["messages"]
    assert first["role"] == "system"
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


@pytest.mark.parametrize("fmt", ["openai", "anthropic"])
@pytest.mark.parametrize("kind", ["l1", "merge"])
def test_the_prompt_sent_asks_for_every_section_and_the_focus(
    fmt: str, kind: str, fake_openai: FakeOpenAI, fake_anthropic: FakeAnthropic
) -> None:
    focus = f"{FOCUS}; token {SECRET}"
    prompt = l1_system_prompt(200, focus) if kind == "l1" else merge_system_prompt(200, focus)
    request = OutboundRequest(kind, prompt, (("user", ({"type": "text", "text": "ran the migration"},)),))  # type: ignore[arg-type]
    summarizer: OpenAIChatSummarizer | AnthropicMessagesSummarizer
    if fmt == "openai":
        summarizer = OpenAIChatSummarizer(fake_openai.base_url, MODEL, api_key_env=KEY_ENV, sleep=lambda s: None)
        server: FakeOpenAI | FakeAnthropic = fake_openai
    else:
        summarizer = AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, api_key_env=KEY_ENV, sleep=lambda s: None)
        server = fake_anthropic
    with summarizer:
        gated = gate(request, compression_image_settings(Recipe()), format=fmt, model=MODEL, max_output_tokens=200)  # type: ignore[arg-type]
        assert summarizer.summarize(gated, kind=kind).text  # type: ignore[arg-type]
    (sent,) = server.requests
    system = _system_text(json.loads(sent.body), fmt)
    for heading in SUMMARY_HEADINGS:
        assert f"{heading}:" in system, heading
    assert f"Focus: {FOCUS}; token [redacted]." in system
    assert SECRET not in sent.body.decode() and "Qm7pR2Qm" not in sent.body.decode()
    assert ("newest status wins" in system) == (kind == "merge")
    assert "[open] or [resolved]" in system


def test_no_focus_no_focus_line() -> None:
    assert "Focus:" not in l1_system_prompt(300) and "Focus:" not in merge_system_prompt(300, "   ")
    assert "Write at most 300 tokens." in l1_system_prompt(300)


def test_a_focus_is_one_bounded_line() -> None:
    assert focus_text("  keep\n the   plan  ") == "keep the plan"
    assert focus_text(None) is None and focus_text(" \n ") is None
    assert focus_text("see ghp_" + "a1B2c3D4e5" * 3 + " now") == "see [redacted] now"
    assert focus_text("x" * MAX_FOCUS_CHARS) == "x" * MAX_FOCUS_CHARS
    with pytest.raises(RecipeError, match=r"summary_focus: the focus is 2,001 characters, over the limit of 2,000"):
        focus_text("x" * (MAX_FOCUS_CHARS + 1))
    with pytest.raises(RecipeError, match="summary_focus"):
        ExtractiveSummarizer(focus="y" * 5000)
    with pytest.raises(RecipeError, match="summary_focus"):
        l1_system_prompt(100, "z" * 3000)


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[Summarizer]:
    built: list[Summarizer] = []
    real = module.summarizer_from_recipe

    def spy(recipe: Recipe) -> Summarizer:
        built.append(real(recipe))
        return built[-1]

    monkeypatch.setattr(module, "summarizer_from_recipe", spy)
    return built


def test_run_focus_reaches_the_summarizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    built = _capture(monkeypatch, compaction.pipeline)
    out = tmp_path / "request.json"
    result = runner().invoke(main, ["run", str(PI), "--budget", "16000", "--focus", FOCUS, "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    (summarizer,) = built
    assert isinstance(summarizer, ExtractiveSummarizer) and summarizer.focus == FOCUS


def test_compress_focus_reaches_the_summarizer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    assert runner().invoke(main, ["import", str(PI), "--store", str(store)]).exit_code == 0
    built = _capture(monkeypatch, compaction.cli)
    result = runner().invoke(main, ["compress", "--store", str(store), "--focus", "the refactor plan", "--json"])
    assert result.exit_code == 0, result.stderr
    (summarizer,) = built
    assert isinstance(summarizer, ExtractiveSummarizer) and summarizer.focus == "the refactor plan"
    assert json.loads(result.stdout)["l1_added"] > 0


@pytest.mark.parametrize("command", ["run", "compress"])
def test_an_over_long_focus_is_one_clear_line(command: str, tmp_path: Path) -> None:
    store = tmp_path / "store.db"
    assert runner().invoke(main, ["import", str(PI), "--store", str(store)]).exit_code == 0
    args = ["run", str(PI), "--budget", "16000"] if command == "run" else ["compress", "--store", str(store)]
    result = runner().invoke(main, [*args, "--focus", "word " * 500])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        "compaction: error: summary_focus: the focus is 2,500 characters, over the limit of 2,000; "
        "say in a sentence or two what summaries should keep"
    )


def test_a_compaction_sends_the_recipe_focus_in_every_prompt(fake_openai: FakeOpenAI) -> None:
    """The compactor's own L1 and merge requests carry the recipe's focus (not only the prompt helpers)."""
    from compaction import Compactor, Message, Store

    store = Store(":memory:")
    for i in range(24):
        store.append([
            Message("user", ({"type": "text", "text": f"step {i}: migrate table t{i} " + "and check the rows " * 30},)),
            Message("assistant", ({"type": "text", "text": f"migrated t{i}; " + "rows match " * 30},)),
        ])
    recipe = Recipe(chunk_target_tokens=300, merge_fanout=2, summary_focus=FOCUS)
    summarizer = OpenAIChatSummarizer(fake_openai.base_url, MODEL, api_key_env=KEY_ENV, sleep=lambda s: None)
    with summarizer:
        report = Compactor(store, recipe, summarizer).tick(keep_tail_tokens=0, close_tail=True)
    assert report.l1_added >= 4 and sum(report.merged.values()) >= 1
    kinds = set()
    for sent in fake_openai.requests:
        system = _system_text(json.loads(sent.body), "openai")
        assert f"Focus: {FOCUS}." in system
        kinds.add("merge" if "newest status wins" in system else "l1")
    assert kinds == {"l1", "merge"}
