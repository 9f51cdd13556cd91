"""Session 16's defects: a key in the proxy's query string, serve's usage exit code, the
"loud JSON text" warning for the format compiled, and budgets larger than a model's window."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import re
from pathlib import Path
from urllib.parse import quote

import click
import httpx
import pytest
from cli_runner import cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from serve_support import openai_answer
from serve_support import settings as serve_settings

from compaction import Message, Recipe, Store, compile_request
from compaction.cli import _require_budget, main
from compaction.credentials import CREDENTIAL_TOKENS
from compaction.model_windows import DEFAULT_WINDOW, MAX_BUDGET_TOKENS, WINDOWS, known_window
from compaction.serve import budget as serve_budget
from compaction.serve import create_app
from compaction.serve.forwarding import query_credentials, redact_query_credentials
from compaction.wire import unknown_blocks_shipped

OPENAI = "/v1/chat/completions"
GEMINI_KEY = "AIzaSyQ7secretGEMINIkey0123456789abcdEF"
AZURE_KEY = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"
TOKEN = "ya29.a0AfH6SMBsecretOAUTHtoken42"


def _stored_bytes(store_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store_dir.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("query", "secret"),
    [
        (f"key={GEMINI_KEY}", GEMINI_KEY),
        (f"api-key={AZURE_KEY}", AZURE_KEY),
        (f"api-version=2024-06-01&api_key={AZURE_KEY}", AZURE_KEY),
        (f"access_token={quote(TOKEN)}", TOKEN),
    ],
)
def test_query_string_key_is_forwarded_but_never_stored_logged_or_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, query: str, secret: str
) -> None:
    sent: list[httpx.Request] = []

    async def upstream(request: httpx.Request) -> httpx.Response:
        await request.aread()
        sent.append(request)
        return httpx.Response(200, json=openai_answer("done"))

    app = create_app(serve_settings(tmp_path), transport=httpx.MockTransport(upstream))
    # an agent that echoes its own call into the history (a curl line in a tool result)
    body = {"model": "gpt-4o", "messages": [
        {"role": "user", "content": f"I ran curl 'https://x.example/v1?{query}' and it failed"}]}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return await client.post(f"{OPENAI}?{query}", json=body, headers={"x-compaction-conversation": "q1"})

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert answer.status_code == 200, answer.text
    assert sent[0].url.query.decode() == query  # forwarded as the client sent it
    assert secret not in json.loads(sent[0].content)["messages"][0]["content"]
    stored = _stored_bytes(tmp_path / "stores")
    assert b"[redacted]" in stored
    assert secret.encode() not in stored and secret[:12].encode() not in stored
    assert secret not in caplog.text and secret not in answer.text


def test_query_string_key_kept_out_of_an_error_shown(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def broken(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError(f"cannot connect to {request.url}")

    app = create_app(serve_settings(tmp_path), transport=httpx.MockTransport(broken))
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as client:
            return await client.post(f"{OPENAI}?key={GEMINI_KEY}", json=body)

    with caplog.at_level(logging.DEBUG):
        answer = asyncio.run(go())
    assert answer.status_code == 502
    assert "cannot reach the upstream" in answer.text and "[redacted]" in answer.text
    assert GEMINI_KEY not in answer.text and GEMINI_KEY not in caplog.text
    assert GEMINI_KEY.encode() not in _stored_bytes(tmp_path / "stores")


_names = st.sampled_from(["key", "KEY", "api-key", "Api_Key", "apikey", "access_token", "access-token", "token"])
_values = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789-._~", min_size=4, max_size=40)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_names, _values, st.lists(st.tuples(st.sampled_from(["alt", "api-version", "beta"]), _values), max_size=3))
def test_query_credentials_finds_every_credential_parameter(name: str, value: str, others: list[tuple[str, str]]) -> None:
    pieces = [f"{k}={v}" for k, v in others] + [f"{name}={value}"]
    found = query_credentials("&".join(pieces))
    assert value in found
    # an ordinary parameter whose value is not credential-shaped is not taken for a key
    for _, other in others:
        if other != value and not re.search(CREDENTIAL_TOKENS, other):
            assert other not in found


@settings(max_examples=200, deadline=None)
@given(_names, st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEF0123456789-._~%", min_size=8, max_size=40),
       st.sampled_from(["", "alt=sse&", "api-version=2024-06-01&"]))
def test_a_logged_url_never_keeps_a_query_credential(name: str, value: str, before: str) -> None:
    line = f'HTTP Request: POST https://gw.example/v1/chat/completions?{before}{name}={value} "HTTP/1.1 200 OK"'
    shown = redact_query_credentials(line)
    assert value not in shown
    assert shown == line.replace(f"{name}={value}", f"{name}=[redacted]")


# -- 2. serve --upstream <bad URL> is a usage error ----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://host/v1", "must be an http(s) base URL such as https://api.openai.com/v1; found 'ftp://host/v1'"),
        ("http://[::1/v1", "must be an http(s) base URL such as https://api.openai.com/v1; found 'an unreadable URL'"),
        ("https://host/v1?x=1", "must be a base URL without a query or fragment; found 'https://host/v1?x=1'"),
        ("not a url", "must be an http(s) base URL such as https://api.openai.com/v1; found 'not a url'"),
    ],
)
def test_serve_refuses_a_bad_upstream_with_exit_2_and_one_error_line(tmp_path: Path, url: str, said: str) -> None:
    result = cli("serve", "--upstream", url, "--store-dir", tmp_path / "stores")
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert errors == [f"Error: Invalid value for '--upstream': {said}"]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "stores").exists()  # refused before any work


# -- 3. the "loud JSON text" warning says what happens for the format compiled -------------------------

MCP_SAMPLE = Path(__file__).parent / "data" / "formats" / "real_s16" / "anthropic__pydantic-ai__mcp-servers.json"


def test_run_to_anthropic_ships_mcp_blocks_natively_without_a_warning(tmp_path: Path) -> None:
    out = tmp_path / "request.json"
    result = cli("run", MCP_SAMPLE, "--to", "anthropic", "--budget", "100000", "--json", "--out", out)
    assert result.exit_code == 0, result.stderr
    assert "loud JSON text" not in result.stderr and "warning" not in result.stderr
    assert json.loads(result.stdout)["unknown_blocks_shipped"] == {}
    shipped = [b["type"] for m in json.loads(out.read_text())["messages"] if isinstance(m["content"], list)
               for b in m["content"]]
    assert shipped.count("mcp_tool_use") == 2 and shipped.count("mcp_tool_result") == 2


@pytest.mark.parametrize(("to", "title"), [("openai", "OpenAI Chat Completions"), ("openai-responses", "OpenAI Responses")])
def test_run_to_openai_warns_that_mcp_blocks_ship_as_text(tmp_path: Path, to: str, title: str) -> None:
    result = cli("run", MCP_SAMPLE, "--to", to, "--budget", "100000", "--json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    shipped = report["unknown_blocks_shipped"]
    assert sorted(shipped) == ["mcp_tool_result", "mcp_tool_use"]
    assert shipped["mcp_tool_use"]["count"] == 2 and shipped["mcp_tool_result"]["count"] == 2
    tokens = sum(v["tokens"] for v in shipped.values())
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert line == (
        f"warning: blocks of types the {title} request format does not take ship as loud JSON text, "
        f"{tokens:,} tokens ({tokens / report['tokens_after']:.1%} of the request): 2 mcp_tool_result, 2 mcp_tool_use"
    )


def test_anthropic_counts_only_what_it_ships_as_text_inside_a_tool_result() -> None:
    store = Store(":memory:")
    store.append([
        Message("user", ({"type": "text", "text": "search"},)),
        Message("assistant", (
            {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}},
            {"type": "tool_use", "id": "t1", "name": "fetch", "input": {"url": "https://x"}},
        )),
        Message("user", ({"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "search_result", "source": "https://x", "title": "x", "content": [{"type": "text", "text": "a"}]},
            {"type": "server_tool_use", "id": "srvtoolu_2", "name": "web_search", "input": {}},
            {"type": "web_page", "url": "https://x"},
        ]},)),
    ])
    anthropic = unknown_blocks_shipped(
        compile_request(store, Recipe(budget_tokens=5000, output_format="anthropic")).request, "o200k_base")
    # the top-level server_tool_use and the nested search_result ship natively; a server_tool_use
    # inside a tool_result and the unknown web_page ship as text
    assert {k: v[0] for k, v in anthropic.items()} == {"server_tool_use": 1, "web_page": 1}
    openai = unknown_blocks_shipped(compile_request(store, Recipe(budget_tokens=5000)).request, "o200k_base")
    assert {k: v[0] for k, v in openai.items()} == {"search_result": 1, "server_tool_use": 2, "web_page": 1}


# -- 4. budgets: absurd ones refused, ones over the model's window warned about ---------------------------

TINY = Path(__file__).parent / "data" / "cases" / "tool-pair-at-window-edge.json"


def _budget_commands() -> list[list[str]]:
    found: list[list[str]] = []

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])
            elif any("--budget" in getattr(p, "opts", []) for p in command.params):
                found.append([*prefix, name])

    walk(main, [])
    return sorted(found)


def test_every_budget_command_is_checked() -> None:
    assert {" ".join(c) for c in _budget_commands()} == {
        "bench", "compile", "compress", "eval", "fleet compress", "inspect", "replay", "run", "serve",
    }


@pytest.mark.parametrize("command", _budget_commands(), ids=" ".join)
@pytest.mark.parametrize("value", ["99999999999999999999", "100000001", "0", "-5", "1.5", "abc", ""])
def test_every_budget_option_refuses_what_is_not_a_sane_token_count(command: list[str], value: str) -> None:
    result = cli(*command, "--budget", value)
    assert result.exit_code == 2, result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert line.startswith("Error: Invalid value for '--budget': ")
    assert "Traceback" not in result.stderr


def test_a_budget_at_the_cap_is_taken() -> None:
    result = cli("run", TINY, "--budget", str(MAX_BUDGET_TOKENS), "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["budget"] == MAX_BUDGET_TOKENS


def test_a_recipe_budget_over_the_cap_is_a_usage_error(tmp_path: Path) -> None:
    recipe = tmp_path / "r.toml"
    recipe.write_text("budget_tokens = 999999999999\n")
    result = cli("run", TINY, "--recipe", recipe)
    assert result.exit_code == 2
    assert "Error: budget_tokens 999,999,999,999 is absurd: at most 100,000,000 tokens" in result.stderr


def test_run_warns_when_the_budget_exceeds_the_named_models_window(tmp_path: Path) -> None:
    result = cli("run", TINY, "--budget", "200000", "--model", "gpt-4o", "--json")
    assert result.exit_code == 0, result.stderr  # warned, not refused: the user may know better
    assert [line for line in result.stderr.splitlines() if "context window" in line] == [
        "warning: the budget of 200,000 tokens exceeds the 128,000-token context window of gpt-4o "
        "by 72,000 tokens; a request that fills it would be refused"
    ]
    assert json.loads(result.stdout)["budget"] == 200_000
    # the recipe's model counts as named
    recipe = tmp_path / "r.toml"
    recipe.write_text('model = "claude-sonnet-4-5"\nbudget_tokens = 250000\n')
    from_recipe = cli("run", TINY, "--recipe", recipe, "--to", "anthropic")
    assert from_recipe.exit_code == 0, from_recipe.stderr
    assert "exceeds the 200,000-token context window of claude-sonnet-4-5 by 50,000 tokens" in from_recipe.stderr
    # within the window, or a model the table does not know: no word
    for args in (["--model", "gpt-4o", "--budget", "128000"], ["--model", "qwen2.5:7b", "--budget", "200000"]):
        quiet = cli("run", TINY, *args)
        assert quiet.exit_code == 0 and "context window" not in quiet.stderr


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(WINDOWS)), st.text(alphabet="-.0123456789abcdefgmnoprstuv", max_size=12),
       st.integers(1, MAX_BUDGET_TOKENS))
def test_the_window_warning_is_said_exactly_when_the_budget_exceeds_the_window(
    prefix: str, suffix: str, budget: int
) -> None:
    model = prefix + suffix
    window = known_window(model)
    assert window is not None and window >= WINDOWS[prefix]  # the longest known prefix wins
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        _require_budget(Recipe(budget_tokens=budget, model=model))
    if budget > window:
        assert err.getvalue() == (
            f"warning: the budget of {budget:,} tokens exceeds the {window:,}-token context window of {model} "
            f"by {budget - window:,} tokens; a request that fills it would be refused\n"
        )
    else:
        assert err.getvalue() == ""


def test_serve_budget_uses_the_shared_window_table() -> None:
    assert serve_budget.WINDOWS is WINDOWS and serve_budget.model_window("gpt-4o-mini") == 128_000
    assert known_window("qwen2.5:7b") is None and serve_budget.model_window("qwen2.5:7b") == DEFAULT_WINDOW
