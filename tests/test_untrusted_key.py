# ruff: noqa: F811  (the imported provider fixture is taken as an argument)
"""The API key never leaves its header: not through a summary, provenance, an error or the CLI.

A server may echo the key anywhere (issue 10, "The API key leaks"): in a 200's content, in
``model`` or ``usage``, in an error message (cut at 300 characters, possibly in the middle of
the key), split by a newline, JSON-escaped, URL-encoded or interleaved with zero-width
spaces.  Each shape runs end to end -- Compactor, an SQLite store on disk, the CLI's
``compress``, ``stats --json`` and ``compile`` -- against both providers' loopback fakes,
then the store's bytes and every output are searched for any 8 characters of the key.  A key
that httpx could not send cleanly (a trailing CR or LF, a control or non-ASCII character)
is refused when the summarizer is built, naming the variable and never the key.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_runner import runner
from fake_openai_server import Raw
from http_providers import (  # noqa: F401
    KEY_ENV,
    SECRET,
    Provider,
    conversation,
    db_bytes,
    leaked,
    provider,
    text_recipe,
)

from compaction.cli import main
from compaction.compactor import Compactor
from compaction.errors import RecipeError, SummarizerError, SummarizerRefused, SummarizerUnavailable
from compaction.recipe import Recipe
from compaction.store import Store
from compaction.summarizers._secrets import scrub_key
from compaction.summarizers.factory import summarizer_from_recipe

#: How a careless or hostile server may echo the key.
SHAPES: dict[str, Callable[[str], str]] = {
    "plain": lambda key: key,
    "newline": lambda key: key[:12] + "\n" + key[12:],
    "crlf_and_spaces": lambda key: key[:6] + "\r\n  " + key[6:20] + " " + key[20:],
    "json_escaped": lambda key: "".join(f"\\u{ord(c):04x}" for c in key),
    "partly_escaped": lambda key: key[:10] + "".join(f"\\u{ord(c):04X}" for c in key[10:20]) + key[20:],
    "url_encoded": lambda key: "".join(f"%{ord(c):02X}" for c in key),
    "zero_width": lambda key: "\u200b".join(key),
    "html_entities": lambda key: "".join(f"&#{ord(c)};" for c in key),
    "prefix_22": lambda key: key[:22],
    "middle_20": lambda key: key[10:30],
    "suffix_12": lambda key: key[-12:],
}


# -- the scrubber on its own ----------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_is_scrubbed(shape: str) -> None:
    text = f"before {SHAPES[shape](SECRET)} after"
    scrubbed = scrub_key(text, SECRET)
    assert leaked(scrubbed) == [] and "[redacted]" in scrubbed
    assert scrubbed.startswith("before ") and scrubbed.endswith(" after")


def test_scrubbing_leaves_other_text_alone() -> None:
    text = "Asked:\n- fix sk-test in src/a.py (100%20 done) \\u0041 &#65; caf\u00e9"
    assert scrub_key(text, SECRET) == text
    assert scrub_key("short keys: abc abc", "abc") == "short keys: abc abc"  # under 4 characters: kept
    assert scrub_key("a key: olla ollama!", "ollama") == "a key: olla [redacted]!"


def test_a_key_holding_escape_characters_is_scrubbed_in_every_form() -> None:
    key = "k%41/b+c\\d" + "Zx9Qw3Er7Ty"
    for form in (key, key.replace("/", "\\/"), "".join(f"%{ord(c):02x}" for c in key)):
        assert leaked(scrub_key(f"x {form} y", key), key) == [], form


# -- the key at load -------------------------------------------------------------------------
@pytest.mark.parametrize("bad, what", [
    (SECRET + "\r", "a carriage return"),
    (SECRET + "\n", "a line feed"),
    (SECRET + "\r\n", "a carriage return"),
    (" " + SECRET, "a space"),
    (SECRET[:10] + "\t" + SECRET[10:], "a tab"),
    (SECRET[:10] + "\x01" + SECRET[10:], "a control character"),
    (SECRET[:10] + "\x7f" + SECRET[10:], "a control character"),
    (SECRET[:10] + "\u00e9" + SECRET[10:], "a non-ASCII character"),
    (SECRET + "\u2028", "a non-ASCII character"),
])
def test_a_key_with_characters_httpx_cannot_send_is_refused_at_load(
    provider: Provider, monkeypatch: pytest.MonkeyPatch, bad: str, what: str
) -> None:
    monkeypatch.setenv(KEY_ENV, bad)
    with pytest.raises(RecipeError) as direct:
        provider.summarizer()
    with pytest.raises(RecipeError) as built:
        summarizer_from_recipe(Recipe(summarizer=provider.settings()))
    with pytest.raises(RecipeError) as read:
        provider.settings().api_key()
    for err in (direct.value, built.value, read.value):
        assert KEY_ENV in str(err) and what in str(err) and leaked(repr(err)) == []
    assert "key 'summarizer.api_key_env'" in str(built.value)
    assert provider.fake.requests == []


def test_a_key_changed_to_a_bad_one_after_load_is_an_error_naming_the_variable(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    with provider.summarizer() as s:
        monkeypatch.setenv(KEY_ENV, SECRET + "\r\n")
        with pytest.raises(SummarizerError, match=KEY_ENV) as caught:
            s.summarize(provider.gated(), kind="l1")
    assert leaked(repr(caught.value)) == [] and provider.fake.requests == []


def test_the_cli_refuses_a_bad_key_in_one_line(
    provider: Provider, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(provider.recipe_toml())
    with Store(tmp_path / "store.db") as store:
        store.append(conversation(3))
    monkeypatch.setenv(KEY_ENV, SECRET + "\n")
    result = runner().invoke(main, ["compress", "--store", str(tmp_path / "store.db"), "--recipe", str(recipe)])
    assert result.exit_code != 0 and KEY_ENV in result.stderr
    assert "Traceback" not in result.stderr and leaked(result.stderr + result.stdout) == []


# -- echoed in a 200 ------------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_a_key_echoed_in_an_answer_is_never_stored_or_shown(
    provider: Provider, tmp_path: Path, shape: str, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(request: Any, headers: dict[str, str]) -> Any:
        echo = SHAPES[shape](provider.key_of(headers))
        return provider.answer(
            request, f"Asked:\n- the key is {echo} (noted)", model=f"served-by-{echo}",
            usage={"note": echo, "output_tokens": 9, echo: 1},
        )

    provider.script(answer)
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "store.db"
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(provider.recipe_toml())
    with Store(path) as store:
        store.append(conversation(4))
    cli = runner()
    compressed = cli.invoke(main, ["compress", "--store", str(path), "--recipe", str(recipe), "--json"])
    assert compressed.exit_code == 0, compressed.stderr
    assert json.loads(compressed.stdout)["l1_added"] >= 1
    stats = cli.invoke(main, ["stats", "--store", str(path), "--recipe", str(recipe), "--json"])
    compiled = cli.invoke(main, ["compile", "--store", str(path), "--recipe", str(recipe), "--budget", "400"])
    assert stats.exit_code == 0 and compiled.exit_code == 0, compiled.stderr
    with Store(path) as store:
        summaries = store.summaries()
        assert summaries and all("[redacted]" in s.text for s in summaries if s.level == 1)
        assert all(s.provenance["usage"]["output_tokens"] == 9 for s in summaries if s.level == 1)
    shown = [compressed.stdout, compressed.stderr, stats.stdout, stats.stderr, compiled.stdout,
             compiled.stderr, caplog.text, json.dumps([[s.text, s.provenance] for s in summaries])]
    for text in shown:
        assert leaked(text) == []
    assert leaked(db_bytes(path)) == [] and SECRET[:8].encode() not in db_bytes(path)


# -- echoed in an error ---------------------------------------------------------------------
def _error_echo(
    provider: Provider, status: int, shape: str, at: int, code: str = "invalid_request_error"
) -> Callable[[Any, dict[str, str]], Raw]:
    """An error answer whose shown text (``code: message``) holds the key (in ``shape``) ``at``
    characters in; ``code`` is the error's code, ``"{key}"`` in it the key."""

    def answer(request: Any, headers: dict[str, str]) -> Raw:
        echo = SHAPES[shape](provider.key_of(headers))
        kind = code.replace("{key}", echo)
        text = "e" * max(0, at - len(kind) - 2) + echo + " and then some more text to push it past the cut" * 3
        if provider.kind == "openai":
            body: Any = {"error": {"message": text, "type": kind, "code": kind}}
        else:
            body = {"type": "error", "error": {"type": kind, "message": text}}
        return Raw(status, {"Content-Type": "application/json"}, body)

    return answer


@pytest.mark.parametrize("shape", ["plain", "newline", "json_escaped", "zero_width"])
@pytest.mark.parametrize("at", [150, 278, 291])  # the text is cut at 297 characters
@pytest.mark.parametrize("status, error", [(400, SummarizerError), (500, SummarizerUnavailable),
                                           (200, SummarizerError)])
def test_a_key_echoed_in_an_error_is_scrubbed_before_it_is_cut(
    provider: Provider, shape: str, at: int, status: int, error: type[Exception]
) -> None:
    if status == 200:  # an error carried by a 200
        inner = _error_echo(provider, 400, shape, at)

        def answer(request: Any, headers: dict[str, str]) -> Raw:
            raw = inner(request, headers)
            return Raw(200, raw.headers, {**raw.body, "choices": [], "content": []})

        provider.script(answer)
    else:
        provider.script(_error_echo(provider, status, shape, at))
    with provider.summarizer(max_retries=0) as s, pytest.raises(error) as caught:
        s.summarize(provider.gated(), kind="l1")
    shown = repr(caught.value) + str(caught.value) + repr(getattr(caught.value, "code", ""))
    assert leaked(shown) == [], str(caught.value)


@pytest.mark.parametrize("status, error", [(400, SummarizerError), (401, SummarizerError),
                                           (413, SummarizerRefused), (503, SummarizerUnavailable)])
def test_an_error_code_echoing_the_key_is_scrubbed(provider: Provider, status: int, error: type[Exception]) -> None:
    provider.script(_error_echo(provider, status, "newline", 100, code="bad_{key}_prompt is too long"))
    with provider.summarizer(max_retries=0) as s, pytest.raises(error) as caught:
        s.summarize(provider.gated(), kind="l1")
    shown = repr(caught.value) + str(caught.value) + repr(getattr(caught.value, "code", ""))
    assert leaked(shown) == [] and "[redacted]" in shown, shown


def test_a_refusal_and_a_finish_reason_echoing_the_key_are_scrubbed(provider: Provider) -> None:
    def answer(request: Any, headers: dict[str, str]) -> Any:
        key = provider.key_of(headers)
        if provider.kind == "openai":
            return {"choices": [{"message": {"content": "x", "refusal": f"no, {key}"}, "finish_reason": key}]}
        return {"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": key}

    provider.script(answer)
    with provider.summarizer(max_retries=0) as s, pytest.raises(SummarizerRefused) as caught:
        s.summarize(provider.gated(), kind="l1")
    assert leaked(repr(caught.value) + str(caught.value) + str(caught.value.code)) == []


@pytest.mark.parametrize("status", [400, 500])
def test_failures_and_stats_hold_no_piece_of_the_key(provider: Provider, tmp_path: Path, status: int) -> None:
    provider.script(_error_echo(provider, status, "plain", 278))  # the cut at 297 characters falls in the key
    path = tmp_path / "store.db"
    recipe = tmp_path / "recipe.toml"
    recipe.write_text(provider.recipe_toml())
    with Store(path) as store:
        store.append(conversation(4))
    cli = runner()
    compressed = cli.invoke(main, ["compress", "--store", str(path), "--recipe", str(recipe), "--json"])
    stats = cli.invoke(main, ["stats", "--store", str(path), "--recipe", str(recipe), "--json"])
    assert compressed.exit_code == 0 and stats.exit_code == 0, compressed.stderr + stats.stderr
    failures = json.loads(stats.stdout)["failures"]
    assert failures and ("HTTP 400" in failures[0]["reason"] or "HTTP 500" in failures[0]["reason"])
    for text in (compressed.stdout, compressed.stderr, stats.stdout, stats.stderr):
        assert leaked(text) == []
    assert leaked(db_bytes(path)) == []


def test_the_compactor_records_scrubbed_failures(provider: Provider, tmp_path: Path) -> None:
    provider.script(_error_echo(provider, 400, "newline", 200))
    with Store(tmp_path / "store.db") as store, provider.summarizer() as s:
        store.append(conversation(3))
        Compactor(store, text_recipe(provider), summarizer=s).tick()
        (failure,) = store.failures()
    assert leaked(failure["reason"]) == [] and "[redacted]" in failure["reason"]
    assert leaked(db_bytes(tmp_path / "store.db")) == []
