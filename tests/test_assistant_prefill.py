"""A request that ends on an assistant turn, for a model that refuses a prefill, is never compiled.

Claude 4.6 models answer a request whose last message is the assistant's with HTTP 400 ("This
model does not support assistant message prefill. The conversation must end with a user
message.", Anthropic's migration guide: "Prefilling assistant messages returns a 400 error on
Claude 4.6 models"), in any request format.  A store whose newest message is the assistant's
compiled to such a request.  The recipe's ``assistant_prefill`` ("auto", "allow", "refuse")
now decides; refused, compile raises ``AssistantPrefillRefused`` before any work and never
invents a user turn; ``inspect`` says the request ends on an assistant turn.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, store_snapshot

from compaction import Message, Recipe, Store, compile_request, compress_and_compile
from compaction.cli import main
from compaction.errors import AssistantPrefillRefused, CompactionError, RecipeError
from compaction.events import compile_current, compile_in_events
from compaction.inspect import inspect_store
from compaction.prefill import final_turn, refuses_prefill
from compaction.recipe import recipe_from_mapping

FORMATS = ["anthropic", "openai", "openai-responses"]


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _history(*roles: str) -> list[Message]:
    return [
        Message(role, [_text(f"message {i} from the {role} about the export job")])
        for i, role in enumerate(roles)
    ]


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


@pytest.mark.parametrize(
    ("model", "refuses"),
    [
        ("claude-opus-4-6", True),
        ("claude-sonnet-4-6", True),
        ("Claude-Sonnet-4-6", True),
        ("claude-sonnet-4.6", True),  # GitHub Copilot's and OpenRouter's spelling
        ("anthropic/claude-opus-4.7", True),
        ("us.anthropic.claude-opus-4-6-v1:0", True),  # Amazon Bedrock
        ("claude-opus-4-6@20260205", True),  # Vertex AI
        ("claude-opus-4-6-thinking", True),
        ("claude-sonnet-5", True),
        ("claude-haiku-4-6", True),
        ("claude-sonnet-4-5", False),
        ("claude-sonnet-4-5-20250929", False),
        ("claude-haiku-4-5", False),
        ("claude-opus-4-1", False),
        ("claude-opus-4-20250514", False),  # a date, not a minor version
        ("claude-3-5-sonnet-20241022", False),
        ("claude-3-7-sonnet-latest", False),
        ("gpt-4o", False),
        ("qwen2.5:7b", False),
    ],
)
def test_the_models_that_refuse_a_prefill(model: str, refuses: bool) -> None:
    assert refuses_prefill(model) is refuses


def test_the_recipe_setting_is_checked_and_kept() -> None:
    with pytest.raises(
        RecipeError, match="key 'assistant_prefill': expected one of 'auto', 'allow', 'refuse'"
    ):
        Recipe(assistant_prefill="alow")
    assert Recipe().assistant_prefill == "auto"
    recipe = Recipe(assistant_prefill="refuse")
    assert recipe.to_dict()["assistant_prefill"] == "refuse"
    assert recipe_from_mapping(recipe.to_dict()) == recipe != Recipe()


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_refusing_model_gets_one_clear_error_naming_it(fmt: str) -> None:
    recipe = Recipe(budget_tokens=4000, output_format=fmt, model="claude-opus-4-6")  # type: ignore[arg-type]
    with Store(":memory:") as store:
        store.append(_history("user", "assistant", "user", "assistant"))
        before = store_snapshot(store)
        with pytest.raises(AssistantPrefillRefused) as caught:
            compile_request(store, recipe)
        assert store_snapshot(store) == before  # nothing stored, nothing invented
    error = caught.value
    assert isinstance(error, ValueError) and isinstance(error, CompactionError)
    assert (error.model, error.seq) == ("claude-opus-4-6", 3)
    message = str(error)
    assert "\n" not in message
    assert message.startswith(
        "the request would end on an assistant turn (message 3, the newest, is the assistant's)"
    )
    assert "claude-opus-4-6 refuses an assistant prefill" in message
    assert "append the user's next message first" in message and 'assistant_prefill = "allow"' in message


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    roles=st.lists(st.sampled_from(["user", "assistant", "system"]), min_size=1, max_size=8).filter(
        lambda r: any(role != "system" for role in r)
    ),
    fmt=st.sampled_from(FORMATS),
    model=st.sampled_from(["claude-opus-4-6", "claude-sonnet-4-5", "gpt-4o"]),
    policy=st.sampled_from(["auto", "allow", "refuse"]),
)
def test_compile_refuses_exactly_the_requests_ending_on_a_refused_assistant_turn(
    roles: list[str], fmt: str, model: str, policy: str
) -> None:
    recipe = Recipe(budget_tokens=100_000, output_format=fmt, model=model, assistant_prefill=policy)  # type: ignore[arg-type]
    last = [role for role in roles if role != "system"][-1]
    refused = last == "assistant" and (
        policy == "refuse" or (policy == "auto" and model == "claude-opus-4-6")
    )
    with Store(":memory:") as store:
        store.append(_history(*roles))
        assert final_turn(store) == (last, max(i for i, role in enumerate(roles) if role != "system"))
        if refused:
            with pytest.raises(AssistantPrefillRefused):
                compile_request(store, recipe)
            with pytest.raises(AssistantPrefillRefused):
                compile_current(store, recipe)
            return
        compiled = compile_request(store, recipe)
    # shipped: the request ends on the store's final turn, as it is (no user turn invented)
    shipped = [role for role, _blocks in compiled.request.messages if role != "system"]
    assert shipped[-1] == last
    user_texts = [
        b.get("text") for role, blocks in compiled.request.messages if role == "user" for b in blocks
    ]
    assert all(isinstance(t, str) and t.startswith("message ") for t in user_texts)


def test_compress_and_compile_refuses_before_any_summarizer_call() -> None:
    # a history that needs compressing: a refusal after it would waste the summarizer's calls
    long = " ".join(f"line{i}" for i in range(300))
    messages = [Message("user" if i % 2 == 0 else "assistant", [_text(f"{i} {long}")]) for i in range(40)]
    recipe = Recipe(budget_tokens=2000, output_format="anthropic", model="claude-sonnet-4-6")
    for mode in ("events", "replan"):
        summarizer = CapturingSummarizer()
        with Store(":memory:") as store:
            store.append(messages)
            before = store_snapshot(store)
            with pytest.raises(AssistantPrefillRefused):
                compress_and_compile(store, recipe, summarizer=summarizer, mode=mode)  # type: ignore[arg-type]
            with pytest.raises(AssistantPrefillRefused):
                compile_in_events(store, recipe, lambda made=summarizer: made)  # type: ignore[misc]
            assert summarizer.requests == [] and store.summaries() == [] and store.events() == []
            assert store_snapshot(store) == before
            # the user's next message appended, the same store compresses and compiles
            store.append([Message("user", [_text("and now?")])])
            compiled, ticks = compress_and_compile(store, recipe, summarizer=summarizer, mode=mode)  # type: ignore[arg-type]
            assert ticks and summarizer.requests and compiled.tokens <= 2000


def test_allow_ships_the_prefill_and_auto_ships_it_to_a_model_that_takes_one() -> None:
    with Store(":memory:") as store:
        store.append(_history("user", "assistant"))
        for recipe in (
            Recipe(
                budget_tokens=4000,
                output_format="anthropic",
                model="claude-opus-4-6",
                assistant_prefill="allow",
            ),
            Recipe(budget_tokens=4000, output_format="anthropic"),  # claude-sonnet-4-5 takes a prefill
        ):
            body = compile_request(store, recipe).request.body()
            assert body["messages"][-1]["role"] == "assistant"


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture(name="ending_on_assistant")
def ending_on_assistant_store(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(_history("system", "user", "assistant"))
    return path


def test_cli_compile_prints_the_line_and_exits_1(ending_on_assistant: Path, tmp_path: Path) -> None:
    args = ["compile", "--store", str(ending_on_assistant), "--budget", "4000", "--to", "anthropic"]
    result = _runner().invoke(main, [*args, "--model", "claude-opus-4-6"])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "compaction: error: the request would end on an assistant turn (message 2"
    )
    assert "claude-opus-4-6 refuses an assistant prefill" in result.stderr
    recipe = tmp_path / "allow.toml"
    recipe.write_text('assistant_prefill = "allow"\n', encoding="utf-8")
    allowed = _runner().invoke(main, [*args, "--model", "claude-opus-4-6", "--recipe", str(recipe)])
    assert allowed.exit_code == 0, allowed.stderr
    assert json.loads(allowed.stdout)["messages"][-1]["role"] == "assistant"


def test_cli_run_refuses_before_compressing(tmp_path: Path) -> None:
    transcript = tmp_path / "t.json"
    transcript.write_text(
        json.dumps(
            [{"role": "user", "content": "fix the export"}, {"role": "assistant", "content": "Fixed."}]
        ),
        encoding="utf-8",
    )
    result = _runner().invoke(
        main, ["run", str(transcript), "--budget", "4000", "--model", "claude-sonnet-4-6"]
    )
    assert result.exit_code == 1
    assert result.stderr.startswith(
        "compaction: error: the request would end on an assistant turn (message 1"
    )


def test_inspect_reports_a_request_ending_on_an_assistant_turn(ending_on_assistant: Path) -> None:
    args = ["inspect", "--store", str(ending_on_assistant), "--budget", "4000", "--to", "anthropic", "--json"]
    refused = _runner().invoke(main, [*args, "--model", "claude-opus-4-6"])
    assert refused.exit_code == 0, refused.stderr
    data = json.loads(refused.stdout)
    assert data["ends_on_assistant_turn"] is True
    assert data["prefill_refused"].startswith("claude-opus-4-6 refuses an assistant prefill")
    assert refused.stderr.startswith(
        "warning: the request ends on an assistant turn, which compaction compile refuses"
    )
    taken = json.loads(_runner().invoke(main, args).stdout)  # claude-sonnet-4-5
    assert (taken["ends_on_assistant_turn"], taken["prefill_refused"]) == (True, None)


def test_inspect_of_a_request_ending_on_a_user_turn_says_so() -> None:
    with Store(":memory:") as store:
        store.append(_history("user", "assistant", "user"))
        data = inspect_store(
            store, Recipe(budget_tokens=4000, model="claude-opus-4-6", assistant_prefill="refuse")
        )
    assert (data.ends_on_assistant_turn, data.prefill_refused) == (False, None)


def test_inspect_html_says_why_compile_refuses() -> None:
    from compaction.inspect_html import render_html

    with Store(":memory:") as store:
        store.append(_history("user", "assistant"))
        data = inspect_store(store, Recipe(budget_tokens=4000, assistant_prefill="refuse"))
    page = render_html(data)
    assert (
        '<p class="warn" id="prefill">The request ends on an assistant turn and compaction compile refuses it: '
        in page
    )
    assert "the recipe sets assistant_prefill = &quot;refuse&quot;" in page


# -- the proxy ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "forwarded"), [("claude-opus-4-6", False), ("claude-sonnet-4-5", True)])
def test_the_proxy_answers_400_instead_of_forwarding_a_refused_prefill(
    tmp_path: Path, model: str, forwarded: bool
) -> None:
    from serve_support import MockUpstream, make_app, post

    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    body = {
        "model": model,
        "max_tokens": 64,
        "messages": [
            {"role": "user", "content": "Answer in JSON."},
            {"role": "assistant", "content": "{"},  # the client's own prefill
        ],
    }
    answer = post(app, "/v1/messages", body, {"x-api-key": "test-key", "anthropic-version": "2023-06-01"})
    if forwarded:
        assert answer.status_code == 200, answer.text
        last = upstream.seen[0].body["messages"][-1]
        assert last["role"] == "assistant" and [b["text"] for b in last["content"]] == ["{"]
        return
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert "claude-opus-4-6 refuses an assistant prefill" in error["message"], error
    assert upstream.seen == []  # nothing forwarded


def test_cli_compress_to_a_budget_compresses_a_store_ending_on_the_assistant(tmp_path: Path) -> None:
    # compressing is not sending: compress --budget planned with the refusing model would have
    # raised before summarizing; it compresses, and compile then refuses
    long = " ".join(f"line{i}" for i in range(300))
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append(
            [Message("user" if i % 2 == 0 else "assistant", [_text(f"{i} {long}")]) for i in range(40)]
        )
    args = ["--store", str(path), "--budget", "3000"]
    recipe = tmp_path / "r.toml"
    recipe.write_text('model = "claude-opus-4-6"\noutput_format = "anthropic"\n', encoding="utf-8")
    result = _runner().invoke(main, ["compress", *args, "--recipe", str(recipe), "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["l1_added"] > 0
    refused = _runner().invoke(main, ["compile", *args, "--recipe", str(recipe)])
    assert refused.exit_code == 1 and "claude-opus-4-6 refuses an assistant prefill" in refused.stderr
