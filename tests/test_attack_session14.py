"""Session 14's new work attacked with bad input and hostile shapes.

What broke is pinned here: model names spelled with the version before the family
(``claude-4.6-opus``) were taken to accept a prefill; ``refuses_prefill(None)`` raised a bare
``AttributeError``; ``--model ""`` was blamed on the recipe file (or ``<replace>``).  Three
defects pinned as strict xfails were fixed after: a newest assistant message larger than the
budget was refused though summarized (the request ends on a user turn); a redacted_thinking
block whose data is not a string shipped to Anthropic as stored; a store of system messages only
compiled to an Anthropic request with ``messages: []``.
What held is tested too (the proxy's 400 in every request format, streamed or not, and a
client's retry after it).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Message, Recipe, Store, compile_request, compress_and_compile
from compaction.cli import main
from compaction.errors import AssistantPrefillRefused, CompactionError, InvalidArgument, RecipeError
from compaction.inspect import inspect_store
from compaction.prefill import refuses_prefill

sys.path.insert(0, str(Path(__file__).parent))

FORMATS = ["anthropic", "openai", "openai-responses"]


def _text(value: str) -> dict[str, str]:
    return {"type": "text", "text": value}


def _runner() -> CliRunner:
    try:
        return CliRunner(mix_stderr=False)  # type: ignore[call-arg]  # click < 8.2
    except TypeError:
        return CliRunner()


# -- model names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "refuses"),
    [
        ("claude-4.6-opus", True),  # the version before the family, as Cursor spells it
        ("claude-4-6-sonnet-thinking", True),
        ("Claude-4.7-Opus-High", True),
        ("claude-5-sonnet", True),
        ("claude-4.5-sonnet", False),
        ("claude-4-sonnet", False),
        ("claude-4-20250514-sonnet", False),  # a date is never a minor version
        ("claude-3-7-sonnet", False),
        ("claude-3-5-sonnet-20241022", False),
    ],
)
def test_a_version_before_the_family_is_read(model: str, refuses: bool) -> None:
    assert refuses_prefill(model) is refuses


@pytest.mark.parametrize("model", [None, 46, b"claude-opus-4-6", ["claude-opus-4-6"]])
def test_a_model_that_is_not_a_string_gets_a_typed_error(model: Any) -> None:
    with pytest.raises(InvalidArgument, match=r"^model: expected a model name \(str\), found ") as caught:
        refuses_prefill(model)
    assert isinstance(caught.value, TypeError) and isinstance(caught.value, CompactionError)


_SPELLINGS = st.sampled_from(
    [
        "claude-{family}-{major}-{minor}",
        "claude-{family}-{major}.{minor}",
        "claude-{major}-{minor}-{family}",
        "claude-{major}.{minor}-{family}",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    spelling=_SPELLINGS,
    family=st.sampled_from(["opus", "sonnet", "haiku", "OPUS", "Sonnet"]),
    major=st.integers(min_value=3, max_value=9),
    minor=st.integers(min_value=0, max_value=9),
    prefix=st.sampled_from(["", "anthropic/", "us.anthropic.", "global.anthropic.", "openrouter/anthropic/"]),
    suffix=st.sampled_from(["", "-20260205", "@20260205", "-v1:0", "-thinking", "[1m]", "-latest"]),
)
def test_every_spelling_refuses_from_claude_4_6_on(
    spelling: str, family: str, major: int, minor: int, prefix: str, suffix: str
) -> None:
    model = prefix + spelling.format(family=family, major=major, minor=minor) + suffix
    assert refuses_prefill(model) is ((major, minor) >= (4, 6)), model


@pytest.mark.parametrize("command", ["compile", "run"])
@pytest.mark.parametrize("model", ["", "   "])
def test_an_empty_model_option_is_a_usage_error_naming_it(tmp_path: Path, command: str, model: str) -> None:
    # it was blamed on the recipe file: "<replace>: key 'model'" or "r.toml (with overrides): key 'model'"
    recipe = tmp_path / "r.toml"
    recipe.write_text("budget_tokens = 4000\n", encoding="utf-8")
    if command == "compile":
        store = tmp_path / "s.db"
        with Store(store) as opened:
            opened.append([Message("user", [_text("fix the export")])])
        args = ["compile", "--store", str(store)]
    else:
        transcript = tmp_path / "t.json"
        transcript.write_text(json.dumps([{"role": "user", "content": "fix the export"}]), encoding="utf-8")
        args = ["run", str(transcript)]
    result = _runner().invoke(main, [*args, "--recipe", str(recipe), "--model", model])
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: Invalid value for '--model': expected a model name, found {model!r}"]
    assert "r.toml" not in result.stderr


# -- a request that would end on a summarized assistant turn -------------------------------------


def _allow(fmt: str) -> Recipe:
    """A 6,000-token recipe for Claude Opus 4.6 that ships a prefill."""
    return Recipe(budget_tokens=6000, output_format=fmt, model="claude-opus-4-6", assistant_prefill="allow")  # type: ignore[arg-type]


def _history_ending_on_a_huge_assistant_turn() -> list[Message]:
    messages = []
    for i in range(10):
        messages.append(Message("user", [_text(f"ask {i} about the export")]))
        messages.append(Message("assistant", [_text(f"answer {i}")]))
    messages.append(Message("user", [_text("list the files")]))
    messages.append(Message("assistant", [_text(" ".join(f"/src/file{i}.py" for i in range(6000)))]))
    return messages


@pytest.mark.parametrize("fmt", FORMATS)
def test_inspect_says_a_summarized_assistant_tail_ends_on_a_user_turn(fmt: str) -> None:
    # what held: the newest message (the assistant's, 35k tokens) cannot be shown raw in 6,000
    # tokens, so it is summarized and the request ends on a user turn, as inspect says
    with Store(":memory:") as store:
        store.append(_history_ending_on_a_huge_assistant_turn())
        allow = _allow(fmt)
        compiled, _ = compress_and_compile(store, allow)
        items = compiled.request.body()["input" if fmt == "openai-responses" else "messages"]
        assert items[-1]["role"] == "user" and compiled.tokens <= 6000
        data = inspect_store(store, allow.replace(assistant_prefill="auto"))
    assert (data.ends_on_assistant_turn, data.prefill_refused) == (False, None)


@pytest.mark.parametrize("fmt", FORMATS)
def test_compile_does_not_refuse_a_request_that_ends_on_a_user_turn(fmt: str) -> None:
    with Store(":memory:") as store:
        store.append(_history_ending_on_a_huge_assistant_turn())
        allow = _allow(fmt)
        compress_and_compile(store, allow)
        compiled = compile_request(store, allow.replace(assistant_prefill="auto"))
    items = compiled.request.body()["input" if fmt == "openai-responses" else "messages"]
    assert items[-1]["role"] == "user"


# -- redacted_thinking with data that is not a string -------------------------------------------


@pytest.mark.parametrize("data", [None, 5, ["a"], "missing"])
def test_an_earlier_redacted_thinking_ships_only_string_data(data: Any) -> None:
    block: dict[str, Any] = {"type": "redacted_thinking"}
    if data != "missing":
        block["data"] = data
    with Store(":memory:") as store:
        store.append(
            [
                Message("user", [_text("q")]),
                Message("assistant", [block, _text("answer")]),
                Message("user", [_text("next")]),
            ]
        )
        body = compile_request(store, Recipe(budget_tokens=4000, output_format="anthropic")).request.body()
    shipped = [
        b
        for m in body["messages"]
        for b in m["content"]
        if isinstance(b, dict) and b.get("type") == "redacted_thinking"
    ]
    assert all(isinstance(b.get("data"), str) and b["data"] for b in shipped), shipped


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("data", [None, "", "Q" * 50_000, 5])
def test_a_final_redacted_thinking_ships_the_loud_line_whatever_its_data(fmt: str, data: Any) -> None:
    from compaction.tokens.counting import REDACTED_THINKING

    with Store(":memory:") as store:
        store.append(
            [
                Message("user", [_text("q")]),
                Message("assistant", [{"type": "redacted_thinking", "data": data}, _text("answer")]),
            ]
        )
        compiled = compile_request(store, Recipe(budget_tokens=4000, output_format=fmt))  # type: ignore[arg-type]
    shipped = json.dumps(compiled.request.body())
    assert "redacted_thinking" not in shipped and "QQQQ" not in shipped
    assert (REDACTED_THINKING in shipped) is (fmt == "anthropic")
    assert compiled.tokens <= 4000


# -- the proxy ----------------------------------------------------------------------------------


def _proxy_body(api: str, model: str, stream: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
    if api == "anthropic":
        messages = [{"role": "user", "content": "Answer in JSON."}, {"role": "assistant", "content": "{"}]
        body = {"model": model, "max_tokens": 64, "messages": messages, "stream": stream}
        return "/v1/messages", body, {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    if api == "openai":
        messages = [{"role": "user", "content": "Answer in JSON."}, {"role": "assistant", "content": "{"}]
        return (
            "/v1/chat/completions",
            {"model": model, "messages": messages, "stream": stream},
            {"authorization": "Bearer k"},
        )
    items = [
        {"role": "user", "content": "Answer in JSON."},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "{"}]},
    ]
    return "/v1/responses", {"model": model, "input": items, "stream": stream}, {"authorization": "Bearer k"}


@pytest.mark.parametrize("api", ["anthropic", "openai", "responses"])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", ["anthropic/claude-sonnet-4.6", "us.anthropic.claude-opus-4-6-v1:0"])
def test_the_proxy_refuses_a_prefill_in_every_format_and_keeps_the_turn(
    tmp_path: Path, api: str, stream: bool, model: str
) -> None:
    from serve_support import MockUpstream, conversations, make_app, post, stored_messages

    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    path, body, headers = _proxy_body(api, model, stream)
    answer = post(app, path, body, headers)
    assert answer.status_code == 400
    assert f"{model} refuses an assistant prefill" in json.dumps(answer.json())
    assert upstream.seen == []
    (conversation,) = conversations(tmp_path / "stores")
    stored = stored_messages(tmp_path / "stores", conversation)
    assert [role for role, _content in stored] == ["user", "assistant"]  # nothing stored is lost


@pytest.mark.parametrize(
    ("retry", "forwarded"),
    [
        ([{"role": "user", "content": "Answer in JSON."}], [("user", "Answer in JSON.")]),
        (
            [
                {"role": "user", "content": "Answer in JSON."},
                {"role": "assistant", "content": "{"},
                {"role": "user", "content": "go on"},
            ],
            [("user", "Answer in JSON."), ("assistant", "{"), ("user", "go on")],
        ),
    ],
)
def test_a_retry_after_the_400_is_forwarded(
    tmp_path: Path, retry: list[dict[str, str]], forwarded: list[tuple[str, str]]
) -> None:
    # the refused turn is stored; a client that drops its prefill, or answers after it, is not stuck
    from serve_support import MockUpstream, make_app, post

    upstream = MockUpstream()
    app = make_app(tmp_path, upstream)
    path, body, headers = _proxy_body("anthropic", "claude-opus-4-6", False)
    assert post(app, path, body, headers).status_code == 400
    again = post(app, path, {**body, "messages": retry}, headers)
    assert again.status_code == 200, again.text
    (seen,) = upstream.seen
    assert [(m["role"], m["content"][0]["text"]) for m in seen.body["messages"]] == forwarded


@pytest.mark.parametrize(
    "model", ["claude-opus-4-6\nsecond line", "claude-opus-4-6\r", "claude-opus-4-6\x1b[31m"]
)
def test_a_model_name_with_a_line_break_keeps_the_refusal_one_line(tmp_path: Path, model: str) -> None:
    # the name was printed as it is: a CLI error of two lines, the second one the caller's text;
    # since session 15 (f4968af, 31d40ee) such a name is refused before anything is compiled, by
    # the recipe and by --model, in one printable line naming the character
    with pytest.raises(RecipeError) as caught:
        Recipe(budget_tokens=4000, model=model)
    message = str(caught.value)
    assert "a character that does not print" in message and message.isprintable()
    path = tmp_path / "s.db"
    with Store(path) as store:
        store.append([Message("user", [_text("q")]), Message("assistant", [_text("a")])])
    result = _runner().invoke(main, ["compile", "--store", str(path), "--budget", "4000", "--model", model])
    assert result.exit_code == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "does not print" in line]
    assert len(errors) == 1 and errors[0].isprintable(), result.stderr


# -- the compiled counter on hostile text --------------------------------------------------------

_HOSTILE_UNITS = st.sampled_from(
    [
        "a",
        "Z",
        "7",
        " ",
        "\n",
        "'s",
        "é",
        "ß",
        "\u0301",
        "\u0100",
        "α",
        "ж",
        "\u05d0",
        "\u0915",
        "\u4e00",
        "\uac00",
    ]
    + ["\x00", "\ufeff", "\ufffe", "\uffff", "\u200d", "\U0001f600", "\U0010ffff", "\ud800", "\udfff"]
)


def _tiktoken_count(encoding: str, text: str) -> int:
    from compaction.tokens.encodings import get_encoding

    try:
        return len(get_encoding(encoding).encode_ordinary(text))
    except UnicodeEncodeError:  # a lone surrogate: tiktoken's own fallback
        fixed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return len(get_encoding(encoding).encode_ordinary(fixed))


@settings(max_examples=400, deadline=None)
@given(
    head=st.lists(_HOSTILE_UNITS, max_size=12).map("".join),
    run=st.sampled_from(["a", "é", "\u0100", "α", "0", "ab", "\u4e00"]),
    length=st.sampled_from([1, 7, 8, 9, 15, 16, 17, 24, 25, 33]),
    tail=st.sampled_from(["", " ", "'s", "\u0100", "\U0001f600", "\ud800"]),
    encoding=st.sampled_from(["o200k_base", "cl100k_base"]),
)
def test_the_compiled_counter_equals_tiktoken_on_hostile_text(
    head: str, run: str, length: int, tail: str, encoding: str
) -> None:
    compiled = importlib.import_module("compaction.tokens._count_c")  # the compiled module itself
    text = head + run * length + tail  # a piece of 8, 9, 16 or 17 units at the string's very end
    assert compiled.PieceCounter(encoding).count(text) == _tiktoken_count(encoding, text), repr(text)


# -- a store of system messages only ------------------------------------------------------------


@pytest.mark.parametrize("policy", ["auto", "refuse"])
def test_a_store_of_system_messages_never_ships_an_empty_anthropic_request(policy: str) -> None:
    with Store(":memory:") as store:
        store.append([Message("system", [_text("You are terse.")])])
        recipe = Recipe(budget_tokens=4000, output_format="anthropic", assistant_prefill=policy)
        try:
            body = compile_request(store, recipe).request.body()
        except CompactionError as err:
            assert "\n" not in str(err)
            return
    assert body["messages"] and body["messages"][0]["role"] == "user", body


# -- refusal == the shipped request ends on an assistant turn, for hostile final turns -----------

_TAILS: dict[str, list[Message]] = {
    "assistant text": [Message("assistant", [_text("done")])],
    "assistant thinking only": [
        Message("assistant", [{"type": "thinking", "thinking": "let me think", "signature": "c2ln"}])
    ],
    "assistant redacted_thinking only": [
        Message("assistant", [{"type": "redacted_thinking", "data": "abc"}])
    ],
    "assistant empty": [Message("assistant", [])],
    "assistant blank text": [Message("assistant", [_text("   ")])],
    "assistant unanswered call": [
        Message("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}])
    ],
    "assistant unknown block": [
        Message("assistant", [{"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {}}])
    ],
    "tool_result user turn": [
        Message("assistant", [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}]),
        Message("user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a b"}]),
    ],
    "system after the assistant": [Message("assistant", [_text("done")]), Message("system", [_text("note")])],
    "user empty": [Message("user", [])],
    "user orphan result": [Message("user", [{"type": "tool_result", "tool_use_id": "nope", "content": "r"}])],
}


@settings(max_examples=150, deadline=None)
@given(
    tail=st.sampled_from(sorted(_TAILS)),
    fmt=st.sampled_from(FORMATS),
    model=st.sampled_from(["claude-opus-4-6", "claude-4.6-opus", "claude-sonnet-4-5", "gpt-4o"]),
    policy=st.sampled_from(["auto", "refuse"]),
)
def test_compile_refuses_exactly_when_the_shipped_request_ends_on_the_assistant(
    tail: str, fmt: str, model: str, policy: str
) -> None:
    history = [Message("system", [_text("You are terse.")]), Message("user", [_text("fix the export")])]
    recipe = Recipe(budget_tokens=8000, output_format=fmt, model=model, assistant_prefill=policy)  # type: ignore[arg-type]
    with Store(":memory:") as store:
        store.append([*history, *_TAILS[tail]])
        shipped = compile_request(store, recipe.replace(assistant_prefill="allow")).request.body()
        items = shipped["input" if fmt == "openai-responses" else "messages"]
        ends_on_assistant = items[-1].get("role") == "assistant"
        refused = policy == "refuse" or model in ("claude-opus-4-6", "claude-4.6-opus")
        if ends_on_assistant and refused:
            with pytest.raises(AssistantPrefillRefused):
                compile_request(store, recipe)
        else:
            assert compile_request(store, recipe).request.body() == shipped
        data = inspect_store(store, recipe)
    assert data.ends_on_assistant_turn is ends_on_assistant
    assert (data.prefill_refused is not None) is (ends_on_assistant and refused)
