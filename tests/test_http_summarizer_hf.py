# ruff: noqa: F811  (the imported fake_openai fixture is taken as an argument)
"""HTTP summarizers take every encoding the counting layer takes, ``hf:`` tokenizers included.

A recipe for a local model (``encoding = "hf:/path/tokenizer.json"``) summarizes through an
OpenAI-compatible server (Ollama, vLLM, llama.cpp) with its own tokenizer counting the
summaries against their bound.  The summarizers check an encoding with the counting layer's
own check (:func:`compaction.tokens.encodings.check_encoding`), so the two accept the same
names.  The tokenizer is a small byte-level BPE trained in the test with ``tokenizers``
(as ``test_hf_tokenizer`` does); the server is :mod:`fake_openai_server` on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_openai_server import FakeOpenAI, completion, fake_openai  # noqa: F401
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hf_tokenizer import MARKERS, train

from compaction.blocks import Message
from compaction.compactor import Compactor, compression_image_settings
from compaction.errors import EncodingDataMissing, RecipeError, SummarizerRefused
from compaction.recipe import Recipe, SummarizerSettings
from compaction.store import Store
from compaction.summarizers._http import summary_token_bound
from compaction.summarizers.anthropic import AnthropicMessagesSummarizer
from compaction.summarizers.factory import summarizer_from_recipe
from compaction.summarizers.openai_chat import OpenAIChatSummarizer
from compaction.tokens.counting import count_text
from compaction.tokens.encodings import check_encoding
from compaction.wire import OutboundRequest, gate

MODEL = "local-qwen"
NOWHERE = "http://127.0.0.1:9/v1"  # never contacted: the constructors connect to nothing


@pytest.fixture(scope="module")
def hf_name(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("hf") / "tokenizer.json"
    train(path, MARKERS["chatml"])
    return f"hf:{path}"


def _conversation(rounds: int) -> list[Message]:
    out: list[Message] = []
    for i in range(rounds):
        out.append(Message("user", ({"type": "text", "text": f"Please fix bug {i} in src/mod_{i}.py " * 4},)))
        out.append(
            Message(
                "assistant", ({"type": "text", "text": f"The cache key of mod_{i} changed; fixed. " * 4},)
            )
        )
    return out


def test_a_recipe_with_an_hf_encoding_summarizes_through_an_http_server(
    fake_openai: FakeOpenAI, hf_name: str, tmp_path: Path
) -> None:
    table = SummarizerSettings(
        kind="openai", base_url=fake_openai.base_url, model=MODEL, timeout_seconds=5, max_retries=0
    )
    recipe = Recipe(
        encoding=hf_name,
        summarizer=table,
        chunk_target_tokens=150,
        chunk_min_messages=2,
        summary_max_tokens=120,
        summarizer_context_tokens=6000,
    )
    with Store(tmp_path / "store.db", encoding=hf_name) as store:
        store.append(_conversation(10))
        summarizer = summarizer_from_recipe(recipe)
        try:
            assert isinstance(summarizer, OpenAIChatSummarizer) and summarizer.encoding == hf_name
            report = Compactor(store, recipe, summarizer=summarizer).tick()
        finally:
            summarizer.close()
        l1 = store.summaries(level=1)
    assert report.failures == 0 and report.l1_added == len(l1) >= 2
    assert len(fake_openai.requests) == report.requests >= len(l1)
    assert all(s.provenance["model"] == MODEL and s.provenance["summarizer"] == "openai-http" for s in l1)


def test_the_summary_bound_is_counted_in_the_recipes_hf_tokenizer(
    fake_openai: FakeOpenAI, hf_name: str
) -> None:
    cap = 20
    bound = summary_token_bound(cap)
    assert bound is not None
    # an answer over the bound in the local tokenizer's tokens but within it in o200k_base's
    words = "zebra quokka xylophone jukebox "
    repeat = next(
        (
            k
            for k in range(1, 200)
            if count_text(words * k, "o200k_base") <= bound < count_text((words * k).strip(), hf_name)
        ),
        None,
    )
    assert repeat is not None
    answer = (words * repeat).strip()
    fake_openai.set_mode("scripted", answer=lambda request, headers: completion(request, answer))
    request = gate(
        OutboundRequest("l1", "Summarize.", (("user", ({"type": "text", "text": "hello"},)),)),
        compression_image_settings(Recipe()),
        format="openai",
        model=MODEL,
        max_output_tokens=cap,
    )
    with OpenAIChatSummarizer(fake_openai.base_url, MODEL, max_output_tokens=cap, max_retries=0) as o200k:
        assert o200k.summarize(request, kind="l1").text == answer
    with OpenAIChatSummarizer(
        fake_openai.base_url, MODEL, max_output_tokens=cap, max_retries=0, encoding=hf_name
    ) as local:
        with pytest.raises(SummarizerRefused) as caught:
            local.summarize(request, kind="l1")
    tokens = count_text(answer, hf_name)
    assert caught.value.code == "summary_too_long"
    assert f"{tokens:,} tokens ({hf_name})" in str(caught.value)


def _verdict(make: Any, name: object) -> str | None:
    """Return ``None`` when ``make(name)`` accepts the encoding, else its error text."""
    try:
        made = make(name)
    except (RecipeError, EncodingDataMissing) as err:
        return str(err)
    made.close() if hasattr(made, "close") else None
    return None


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.one_of(
        st.sampled_from(
            [
                "o200k_base",
                "cl100k_base",
                "p50k_base",
                "O200K_BASE",
                "hf:",
                "hf:/no/such/dir/tokenizer.json",
                "hf:https://huggingface.co/x/tokenizer.json",
                "",
            ]
        ),
        st.text(max_size=24),
        st.none(),
        st.integers(),
        st.just(b"o200k_base"),
        st.just(["o200k_base"]),
    ),
    st.sampled_from(["", "#chatml", "#llama3", "#vicuna", None]),
)
def test_a_summarizer_accepts_exactly_the_encodings_the_counting_layer_accepts(
    hf_name: str, name: object, hf_suffix: str | None
) -> None:
    if hf_suffix is not None:
        name = hf_name + hf_suffix
    counting = _verdict(check_encoding, name)
    for cls in (OpenAIChatSummarizer, AnthropicMessagesSummarizer):
        verdict = _verdict(lambda n: cls(NOWHERE, MODEL, api_key_env=None, encoding=n), name)  # noqa: B023
        if counting is None:
            assert verdict is None, (cls.__name__, name, verdict)
        else:
            assert verdict == f"encoding: {counting}", (cls.__name__, name, verdict)
