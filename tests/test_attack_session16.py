"""Session 16's attack on the whole tool as a hostile user and a hostile server would make it.

Each test failed before its fix:

1. A number JSON cannot carry (``1e999``, which Python reads as ``inf``, and the literals
   ``NaN`` and ``Infinity`` its parser takes) was imported, stored and shipped as
   ``Infinity`` in the request body, which no provider parses.  A block holding one is now a
   malformed message: one line naming the file, the line and the number.
2. Under ``image_policy = "placeholders"`` an image's base64 shipped as text inside a block
   the request format cannot carry (a ``tool_result`` nested in another, a block of an
   unknown type with a base64 source, a media type that lies): the stand-in now names the
   media type and length instead of the bytes.
3. A transcript, recipe, tool list, ``--content`` file or file to count that is a pipe or a
   device hung (``/dev/zero`` read forever; a FIFO blocked, or lost what the format
   detection read and was said to be cut short): refused in one line before it is opened.
4. An upstream's redirect reached the client as a bare 3xx with no body and no ``Location``:
   now a 502 in the API's error shape naming the host it pointed to; nothing follows it and
   the key never reaches the other host, the stores or the log.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import struct
import subprocess
import sys
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cli_runner import cli
from hypothesis import given, settings
from hypothesis import strategies as st
from serve_support import free_port, live_server, wait_until_serving

from compaction import InvalidMessage, Recipe, Store, append_anthropic, compress_and_compile
from compaction.blocks import Message, unknown_block_text
from compaction.serve import Limits, ServeSettings, create_app

COMPACTION = [sys.executable, "-m", "compaction"]
FORMATS = ["openai", "anthropic", "openai-responses"]


def _strict_json(text: str) -> Any:
    """Parse ``text`` as JSON proper: ``NaN`` and ``Infinity`` are refused as providers refuse them."""

    def refuse(literal: str) -> Any:
        raise ValueError(f"not JSON: {literal}")

    return json.loads(text, parse_constant=refuse)


def _one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# -- 1. numbers JSON cannot carry -----------------------------------------------------------------------

ANTHROPIC_TURNS = [
    '{"role":"user","content":"run it"}',
    '{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"calc","input":{"x":NUMBER}}]}',
    '{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"ok"}]}',
    '{"role":"user","content":"thanks"}',
]


@pytest.mark.parametrize(
    ("number", "shown"), [("1e999", "inf"), ("-1e999", "-inf"), ("NaN", "nan"), ("Infinity", "inf")]
)
def test_a_number_json_cannot_carry_is_refused_at_import_naming_file_and_line(
    tmp_path: Path, number: str, shown: str
) -> None:
    """Before: imported, then shipped as {"x":Infinity} in the Anthropic body (rc 0)."""
    good = tmp_path / "good.jsonl"
    good.write_text('{"role":"user","content":"kept"}\n', "utf-8")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(ANTHROPIC_TURNS).replace("NUMBER", number) + "\n", "utf-8")
    store = tmp_path / "s.db"
    assert cli("import", good, "--store", store, "--conversation", "c").exit_code == 0
    result = cli("import", bad, "--store", store, "--conversation", "c")
    assert result.exit_code == 1
    line = _one_error_line(result.stderr)
    assert line.startswith(f"compaction: error: {bad}:2: malformed assistant message: content[0]: ")
    assert f"the tool_use block holds the number {shown}, which JSON cannot carry" in line
    with Store(store, create=False) as opened:
        assert [m.text() for m in opened.messages()] == ["kept"]  # nothing stored lost, nothing added
    out = tmp_path / "request.json"
    assert cli("run", bad, "--budget", "1000", "--to", "anthropic", "--out", out).exit_code == 1
    assert not out.exists()


def test_lenient_skips_the_line_and_every_request_is_json(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(ANTHROPIC_TURNS).replace("NUMBER", "1e999") + "\n", "utf-8")
    for to in FORMATS:
        out = tmp_path / f"{to}.json"
        result = cli("run", bad, "--budget", "1000", "--to", to, "--lenient", "--out", out)
        assert result.exit_code == 0, result.stderr
        assert "bad.jsonl:2: malformed assistant message" in result.stderr
        body = _strict_json(out.read_text("utf-8"))
        assert "Infinity" not in out.read_text("utf-8") and body["model"]


def test_openai_arguments_overflowing_a_double_are_refused(tmp_path: Path) -> None:
    """Chat arguments are JSON text: '{"x": 1e999}' became input {"x": inf}, shipped as Infinity."""
    path = tmp_path / "chat.json"
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1e999}'}}
    path.write_text(
        json.dumps(
            [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            ]
        ),
        "utf-8",
    )
    result = cli("run", path, "--budget", "1000")
    assert result.exit_code == 1
    assert (
        "messages[1]: malformed assistant message: content[0]: the tool_use block holds the number inf"
        in (_one_error_line(result.stderr))
    )


FINITE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=4), FINITE, max_size=3),
    bad=st.sampled_from([math.inf, -math.inf, math.nan]),
    path=st.lists(st.sampled_from(["k", 0]), max_size=4),
)
def test_a_non_finite_number_anywhere_in_a_block_is_refused(
    value: dict[str, Any], bad: float, path: list[Any]
) -> None:
    """Invariant: a message holds no number JSON cannot carry, however deep it sits."""
    nested: Any = bad
    for step in reversed(path):
        nested = [nested] if step == 0 else {"k": nested}
    block = {"type": "tool_use", "id": "t", "name": "f", "input": {**value, "deep": nested}}
    with pytest.raises(InvalidMessage, match="which JSON cannot carry"):
        Message("assistant", (block,))
    with pytest.raises(InvalidMessage, match="which JSON cannot carry"):
        Message("user", ({"type": "opaque_kind", "field": nested},))


@settings(max_examples=60, deadline=None)
@given(value=st.dictionaries(st.text(max_size=4), FINITE, max_size=3), to=st.sampled_from(FORMATS))
def test_finite_inputs_compile_to_strict_json(value: dict[str, Any], to: str) -> None:
    """Invariant: every compiled body is JSON proper (no NaN, no Infinity)."""
    store = Store(":memory:")
    try:
        append_anthropic(
            store,
            [
                {"role": "user", "content": "go"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": value}],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
                },
            ],
        )
        compiled, _ = compress_and_compile(
            store, Recipe(budget_tokens=100_000, output_format=to), mode="replan"
        )
        _strict_json(compiled.request.payload.decode("utf-8"))
    finally:
        store.close()


def test_the_api_refuses_infinity_and_stores_nothing() -> None:
    store = Store(":memory:")
    try:
        append_anthropic(store, [{"role": "user", "content": "first"}])
        bad = {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"x": math.inf}}],
        }
        with pytest.raises(InvalidMessage, match="holds the number inf"):
            append_anthropic(store, [{"role": "user", "content": "second"}, bad])
        assert [m.text() for m in store.messages()] == ["first"]
    finally:
        store.close()


# -- 2. no image byte as text under placeholders --------------------------------------------------------


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\x00" * 3 * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


PNG = base64.b64encode(_png(4, 4)).decode()
GIF = base64.b64encode(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;" + bytes(40)).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(60)).decode()
#: What a body must not hold: the first characters of each image's base64.
IMAGE_PREFIXES = [PNG[:24], GIF[:24], JPEG[:24]]


def _image_source(data: str, media_type: str = "image/png") -> dict[str, Any]:
    return {"type": "base64", "media_type": media_type, "data": data}


def _hidden_images_transcript(path: Path) -> Path:
    """Images where no request format carries an image: a tool result nested in a tool result,
    blocks of unknown types (a base64 source, a lying media type, base64 under any key)."""
    turns = [
        {"role": "user", "content": "start"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "inner",
                            "content": [{"type": "image", "source": _image_source(PNG)}],
                        },
                    ],
                }
            ],
        },
        {"role": "assistant", "content": "ok"},
        {
            "role": "user",
            "content": [
                {"type": "screenshot", "source": _image_source(PNG)},
                {"type": "attachment", "source": _image_source(GIF, "application/pdf")},
                {"type": "frame", "pixels": JPEG, "meta": {"thumb": PNG}},
            ],
        },
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "go"},
    ]
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n", "utf-8")
    return path


@pytest.mark.parametrize("to", FORMATS)
def test_no_image_byte_ships_as_text_under_placeholders(tmp_path: Path, to: str) -> None:
    """Before: the nested image and the unknown blocks' base64 shipped inside their JSON text."""
    transcript = _hidden_images_transcript(tmp_path / "t.jsonl")
    out = tmp_path / "body.json"
    result = cli("run", transcript, "--budget", "100000", "--vision", "false", "--to", to, "--out", out)
    assert result.exit_code == 0, result.stderr
    shipped = out.read_text("utf-8")
    for prefix in IMAGE_PREFIXES:
        assert prefix not in shipped
    assert ";base64," not in shipped and "data:image" not in shipped
    assert shipped.count(f"[base64 data (image/png) of {len(PNG):,} characters not shown") == 2
    assert f"[base64 data (application/pdf) of {len(GIF):,} characters not shown" in shipped
    assert f"[base64 image/jpeg data of {len(JPEG):,} characters not shown" in shipped
    with Store(tmp_path / "s.db") as store:  # and the store keeps every byte
        store.append(
            Message(
                m["role"],
                tuple(m["content"])
                if isinstance(m["content"], list)
                else ({"type": "text", "text": m["content"]},),
            )
            for m in map(json.loads, transcript.read_text().splitlines())
        )
        stored = json.dumps([list(m.content) for m in store.messages()])
    assert PNG in stored and GIF in stored and JPEG in stored


@settings(max_examples=150, deadline=None)
@given(
    kind=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=10).filter(
        lambda k: k not in {"text", "image", "tool_use", "tool_result", "thinking", "redacted_thinking"}
    ),
    image=st.sampled_from([PNG, GIF, JPEG, PNG.replace("+", "-").replace("/", "_")]),
    keys=st.lists(st.text(alphabet="abcdefgh", min_size=1, max_size=4), min_size=1, max_size=4),
    as_source=st.booleans(),
    media_type=st.sampled_from(["image/png", "image/gif", "text/plain", "application/octet-stream"]),
)
def test_an_unknown_block_s_stand_in_never_holds_image_base64(
    kind: str, image: str, keys: list[str], as_source: bool, media_type: str
) -> None:
    """Invariant: whatever key holds it and whatever media type is declared, no image base64 is shown."""
    value: Any = _image_source(image, media_type) if as_source else image
    for key in reversed(keys):
        value = {key: value}
    text = unknown_block_text({"type": kind, **value})
    assert image[:24] not in text
    assert "characters not shown: it is inside a block this format cannot carry" in text
    assert text.startswith(f"[content block of type {kind!r} not supported by this format: ")


# -- 3. pipes and devices ------------------------------------------------------------------------------


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in a process of its own: a hang is a failure (timeout), not a stuck test run."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(
        [*COMPACTION, *map(str, args)], capture_output=True, text=True, timeout=60, cwd=cwd, env=env
    )


@pytest.fixture
def transcript(tmp_path: Path) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text('{"role":"user","content":"hi"}\n{"role":"assistant","content":"yo"}\n', "utf-8")
    return path


@pytest.fixture
def fifo(tmp_path: Path, transcript: Path) -> Iterator[Path]:
    """A named pipe a writer fills with the transcript (the writer is freed at the end)."""
    path = tmp_path / "pipe.jsonl"
    os.mkfifo(path)

    def write() -> None:
        try:
            path.write_bytes(transcript.read_bytes())
        except BrokenPipeError:  # the reader below (or the command) closed it unread: expected
            pass

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    yield path
    if writer.is_alive():  # nobody opened it: open it once so the writer returns
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        writer.join(10)


@pytest.mark.parametrize("command", ["import", "run"])
def test_a_fifo_transcript_is_refused_in_one_line(tmp_path: Path, fifo: Path, command: str) -> None:
    """Before: import blocked; run read the pipe twice and said the file was cut short."""
    extra = ["--store", tmp_path / "s.db"] if command == "import" else ["--budget", "100"]
    result = _run(command, fifo, *extra, cwd=tmp_path)
    assert result.returncode == 1
    assert _one_error_line(result.stderr) == (
        f"compaction: error: {fifo}: cannot read the transcript: it is a pipe (FIFO), not a regular file "
        "(a transcript is read twice, its head and then the whole); save it to a file first"
    )
    assert not (tmp_path / "s.db").exists() or command == "run"


@pytest.mark.parametrize(
    ("args", "what"),
    [
        (["import", "/dev/zero", "--format", "openai", "--store", "s.db"], None),
        (["run", "T", "--budget", "100", "--recipe", "/dev/zero"], "a recipe"),
        (["run", "T", "--budget", "100", "--tools", "/dev/zero"], "a tool list"),
        (["count", "T", "/dev/zero"], "a file to count"),
    ],
)
def test_dev_zero_is_refused_in_one_line(
    tmp_path: Path, transcript: Path, args: list[str], what: str | None
) -> None:
    """Before: each read /dev/zero until the timeout, memory growing."""
    result = _run(*[transcript if a == "T" else a for a in args], cwd=tmp_path)
    assert result.returncode == 1
    line = _one_error_line(result.stderr)
    if what is None:
        assert line == (
            "compaction: error: /dev/zero: cannot read the transcript: it is a character device, not a regular "
            "file (a transcript is read twice, its head and then the whole); save it to a file first"
        )
    else:
        assert line == (
            f"compaction: error: /dev/zero is a character device, not a regular file: {what} is read from a "
            "file; save it to one first"
        )


def test_edit_content_from_dev_zero_is_refused_and_the_store_unchanged(
    tmp_path: Path, transcript: Path
) -> None:
    store = tmp_path / "s.db"
    assert _run("import", transcript, "--store", store, cwd=tmp_path).returncode == 0
    result = _run("edit", "--store", store, "0", "--content", "/dev/zero", cwd=tmp_path)
    assert result.returncode == 1
    assert _one_error_line(result.stderr).endswith(
        "/dev/zero is a character device, not a regular file: "
        "--content is read from a file; save it to one first"
    )
    with Store(store, create=False) as opened:
        assert [m.text() for m in opened.messages()] == ["hi", "yo"]


def test_a_fifo_recipe_is_refused(tmp_path: Path, transcript: Path) -> None:
    recipe = tmp_path / "recipe.toml"
    os.mkfifo(recipe)
    result = _run("run", transcript, "--budget", "100", "--recipe", recipe, cwd=tmp_path)
    assert result.returncode == 1
    assert _one_error_line(result.stderr) == (
        f"compaction: error: {recipe} is a pipe (FIFO), not a regular file: a recipe is read from a file; "
        "save it to one first"
    )


# -- 4. an upstream that redirects ----------------------------------------------------------------------

KEY = "sk-ant-REDIRECTqrstuvwx9876543210ABC"


class _Upstream:
    """A loopback server: every POST gets ``status`` with a ``Location`` and records its headers."""

    def __init__(self, status: int, location: str | None) -> None:
        self.headers: list[dict[str, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                payload = b'{"moved": true}'
                self.send_response(status)
                if location is not None:
                    self.send_header("Location", location)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_clear_502_and_the_key_goes_nowhere_else(
    tmp_path: Path, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Before: the client got the bare 3xx (its body, no Location) as if it were the answer."""
    elsewhere = _Upstream(200, None)
    redirecting = _Upstream(status, elsewhere.url + "/messages?token=" + KEY)
    store_dir = tmp_path / "stores"
    app = create_app(ServeSettings(redirecting.url, store_dir, limits=Limits(timeout_seconds=10)))
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi " + KEY}],
    }
    try:
        with caplog.at_level(logging.INFO, logger="compaction"), live_server(app) as proxy:
            answer = httpx.post(
                f"{proxy}/messages",
                json=body,
                timeout=30,
                headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
            )
    finally:
        redirecting.close()
        elsewhere.close()
    assert answer.status_code == 502
    assert answer.json() == {
        "type": "error",
        "error": {
            "type": "api_error",
            "message": (
                f"compaction serve: the upstream answered {status} redirecting to host 127.0.0.1; redirects are not "
                "followed (the client's credentials would go with them): give --upstream the URL that answers"
            ),
        },
    }
    assert len(redirecting.headers) == 1 and redirecting.headers[0]["x-api-key"] == KEY
    assert elsewhere.headers == []  # never followed
    assert KEY[8:] not in answer.text
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("compaction")]
    assert any("error=upstream_redirect" in line for line in logged)
    assert all(KEY[8:16] not in line for line in logged)
    for path in store_dir.rglob("*"):
        if path.is_file():
            assert KEY[8:16].encode() not in path.read_bytes(), path


def test_a_client_body_holding_1e999_gets_400_and_nothing_goes_upstream(tmp_path: Path) -> None:
    upstream = _Upstream(200, None)
    app = create_app(ServeSettings(upstream.url, tmp_path / "stores", limits=Limits(timeout_seconds=10)))
    raw = (
        b'{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":'
        b'[{"type":"text","text":"x","n":1e999}]}]}'
    )
    try:
        with live_server(app) as proxy:
            answer = httpx.post(
                f"{proxy}/messages", content=raw, timeout=30, headers={"content-type": "application/json"}
            )
    finally:
        upstream.close()
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message.startswith("compaction serve: malformed messages: messages[0]: malformed user message: ")
    assert "content[0]: the text block holds the number inf, which JSON cannot carry" in message
    assert upstream.headers == []


# -- 5. a media type that lies ------------------------------------------------------------------------

#: Real image bytes of each type the providers take, base64.
REAL_IMAGES = {
    "image/png": PNG,
    "image/gif": base64.b64encode(
        b"GIF89a\x01\x00\x01\x00\x80\x00\x00\x00\x00\x00\xff\xff\xff!\xf9\x04\x01\x00\x00\x00\x00"
        b",\x00\x00\x00\x00\x01\x00\x01\x00\x00\x02\x02D\x01\x00;"
    ).decode(),
}


def _shipped_media_types(payload: str) -> list[str]:
    """The media type of every image the body ships (a base64 source, or a data URI)."""
    body = json.loads(payload)
    found: list[str] = []
    pending: list[Any] = [body]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if item.get("type") == "base64" and isinstance(item.get("media_type"), str):
                found.append(item["media_type"])
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and item.startswith("data:image/"):
            found.append(item[len("data:") : item.index(";")])
    return sorted(found)


@settings(max_examples=40, deadline=None)
@given(
    real=st.sampled_from(sorted(REAL_IMAGES)),
    declared=st.sampled_from(
        ["image/png", "image/jpeg", "image/gif", "image/webp", "application/octet-stream"]
    ),
    to=st.sampled_from(FORMATS),
    in_result=st.booleans(),
)
def test_a_kept_image_ships_the_media_type_of_its_bytes(
    real: str, declared: str, to: str, in_result: bool
) -> None:
    """Before: PNG bytes declared image/jpeg shipped as image/jpeg, which a provider refuses."""
    image = {"type": "image", "source": _image_source(REAL_IMAGES[real], declared)}
    store = Store(":memory:")
    try:
        if in_result:
            append_anthropic(
                store,
                [
                    {"role": "user", "content": "look"},
                    {
                        "role": "assistant",
                        "content": [{"type": "tool_use", "id": "toolu_1", "name": "shot", "input": {}}],
                    },
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [image]}],
                    },
                ],
            )
        else:
            append_anthropic(store, [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}])
        compiled, _ = compress_and_compile(
            store, Recipe(budget_tokens=100_000, output_format=to), mode="replan"
        )
        assert compiled.request.images_replaced == 0
        assert _shipped_media_types(compiled.request.payload.decode("utf-8")) == [real]
        (stored,) = [
            b for m in store.messages() for b in m.content if b.get("type") in ("image", "tool_result")
        ]
        kept = stored if stored["type"] == "image" else stored["content"][0]
        assert kept["source"]["media_type"] == declared  # the store keeps what came
    finally:
        store.close()


@pytest.mark.parametrize("to", FORMATS)
def test_a_data_uri_ships_the_media_type_of_its_bytes(to: str) -> None:
    store = Store(":memory:")
    try:
        append_anthropic(store, [{"role": "user", "content": f"see data:image/jpeg;base64,{PNG} now"}])
        compiled, _ = compress_and_compile(
            store, Recipe(budget_tokens=100_000, output_format=to), mode="replan"
        )
        assert _shipped_media_types(compiled.request.payload.decode("utf-8")) == ["image/png"]
    finally:
        store.close()


# -- 6. an image larger than Anthropic takes ------------------------------------------------------------


def _png_declaring(width: int, height: int) -> str:
    """The base64 of a 1x1 PNG whose header declares ``width`` x ``height`` pixels (a size is
    read from the header, never by decoding)."""
    data = bytearray(_png(1, 1))
    data[16:24] = struct.pack(">II", width, height)
    return base64.b64encode(bytes(data)).decode()


@settings(max_examples=40, deadline=None)
@given(
    width=st.integers(1, 20_000),
    height=st.integers(1, 20_000),
    to=st.sampled_from(FORMATS),
)
def test_anthropic_gets_no_image_over_8000_px_a_side(width: int, height: int, to: str) -> None:
    """Before: a 1280x12000 full-page screenshot shipped to Anthropic, which refuses the request."""
    image = {"type": "image", "source": _image_source(_png_declaring(width, height))}
    store = Store(":memory:")
    try:
        append_anthropic(store, [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}])
        compiled, _ = compress_and_compile(
            store, Recipe(budget_tokens=100_000, output_format=to), mode="replan"
        )
        shipped = compiled.request.payload.decode("utf-8")
        too_large = to == "anthropic" and max(width, height) > 8000
        assert compiled.request.images_replaced == (1 if too_large else 0)
        assert (_shipped_media_types(shipped) == []) is too_large
        if too_large:
            assert (
                f"reason: larger than the request format takes ({width}x{height} px; at most 8000 px a side)"
            ) in shipped
    finally:
        store.close()


@pytest.mark.parametrize("to", FORMATS)
def test_a_url_source_holding_a_data_uri_ships_as_inline_bytes(to: str) -> None:
    """Before: Anthropic got {"type": "url", "url": "data:image/jpeg;base64,..."}, a URL it cannot fetch."""
    image = {"type": "image", "source": {"type": "url", "url": f"data:image/jpeg;base64,{PNG}"}}
    store = Store(":memory:")
    try:
        append_anthropic(store, [{"role": "user", "content": [{"type": "text", "text": "look"}, image]}])
        compiled, _ = compress_and_compile(
            store, Recipe(budget_tokens=100_000, output_format=to), mode="replan"
        )
        shipped = compiled.request.payload.decode("utf-8")
        assert compiled.request.images_replaced == 0
        assert _shipped_media_types(shipped) == ["image/png"]
        if to == "anthropic":
            assert '"type":"url"' not in shipped and "data:image" not in shipped
            assert f'"data":"{PNG}"' in shipped
    finally:
        store.close()


# -- 7. a key in the upstream URL ------------------------------------------------------------------------

URL_KEY = "sk-URLKEYqrstuvwx9876543210ABCDEF"


def test_a_key_in_the_upstream_url_is_never_logged(tmp_path: Path) -> None:
    """Before: the start-up line said 'forwarding to http://gw:sk-...@127.0.0.1:PORT/v1' on stderr."""
    upstream = _Upstream(200, None)
    host_port = upstream.url.removeprefix("http://").removesuffix("/v1")
    port = free_port()
    command = [
        *COMPACTION,
        "serve",
        "--upstream",
        f"http://gw:{URL_KEY}@{host_port}/v1",
        "--port",
        str(port),
        "--store-dir",
        str(tmp_path / "stores"),
    ]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    try:
        wait_until_serving(process, port)
    finally:
        process.terminate()
        _out, err = process.communicate(timeout=15)
        upstream.close()
    log = err.decode()
    assert f"forwarding to http://gw:***@{host_port}/v1, stores in " in log
    assert URL_KEY[:12] not in log and URL_KEY[-12:] not in log


@pytest.mark.parametrize("url", [f"ftp://gw:{URL_KEY}@host/v1", f"http://gw:{URL_KEY}@host/v1?x=1"])
def test_a_refused_upstream_url_is_shown_without_its_key(tmp_path: Path, url: str) -> None:
    result = cli("serve", "--upstream", url, "--store-dir", tmp_path / "stores")
    assert result.exit_code == 2  # a usage error (session 16 brought it back from 1)
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("Error:")]
    assert line.startswith("Error: Invalid value for '--upstream': must be ") and "gw:***@host/v1" in line
    assert URL_KEY[:12] not in result.stderr and URL_KEY[-12:] not in result.stderr


def test_an_unreadable_upstream_url_is_one_line() -> None:
    result = cli("serve", "--upstream", "http://[::1/v1")
    assert result.exit_code == 2  # a usage error (session 16 brought it back from 1)
    assert [line for line in result.stderr.splitlines() if line.startswith("Error:")] == [
        "Error: Invalid value for '--upstream': must be an http(s) base URL such as https://api.openai.com/v1; "
        "found 'an unreadable URL'"
    ]
    assert "Traceback" not in result.stderr


# -- 8. a tool call whose arguments hold a "type" ----------------------------------------------------------

SCHEMA_INPUT = {
    "type": ["string", "null"],
    "items": {"type": "image_url", "image_url": {"url": "https://example.com/y.png"}},
    "example": {"type": "image", "source": {"type": "url", "url": "https://example.com/z.png"}},
}


@pytest.mark.parametrize("to", FORMATS)
@pytest.mark.parametrize("vision", [True, False])
def test_tool_arguments_shaped_like_blocks_ship_unchanged(to: str, vision: bool) -> None:
    """Before, to Anthropic: {"type": [...]} in a tool input crashed the gate (TypeError, a
    traceback from the CLI), and {"type": "image"} in one was counted as an image input, so
    every compile failed ("the body carries 1 image inputs, the gate kept 0")."""
    store = Store(":memory:")
    try:
        append_anthropic(
            store,
            [
                {"role": "user", "content": "write the schema"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "tool_use", "id": "toolu_1", "name": "schema", "input": SCHEMA_INPUT}
                    ],
                },
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}],
                },
            ],
        )
        recipe = Recipe(budget_tokens=100_000, output_format=to, vision=vision)
        compiled, _ = compress_and_compile(store, recipe, mode="replan")
        body = json.loads(compiled.request.payload)
        assert compiled.request.images_replaced == 0
        shipped_inputs = [
            json.loads(call["function"]["arguments"]) if "function" in call else call.get("input")
            for message in body.get("messages", body.get("input", []))
            for call in (message.get("tool_calls") or message.get("content") or [message])
            if isinstance(call, dict) and ("function" in call or call.get("type") == "tool_use")
        ] + [
            json.loads(item["arguments"])
            for item in body.get("input", [])
            if item.get("type") == "function_call"
        ]
        assert shipped_inputs == [SCHEMA_INPUT]
    finally:
        store.close()


def test_the_cli_compiles_a_schema_shaped_tool_input_for_anthropic(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    turns = [
        {"role": "user", "content": "write the schema"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "s", "input": SCHEMA_INPUT}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        {"role": "user", "content": "thanks"},
    ]
    path.write_text("\n".join(json.dumps(t) for t in turns) + "\n", "utf-8")
    result = cli("run", path, "--budget", "5000", "--to", "anthropic", "--out", tmp_path / "body.json")
    assert result.exit_code == 0, result.stderr
    body = json.loads((tmp_path / "body.json").read_text("utf-8"))
    assert body["messages"][1]["content"][0]["input"] == SCHEMA_INPUT


# -- 9. a list or object where a name was expected --------------------------------------------------------


def _openhands_with_object_observation(path: Path) -> Path:
    """The shipped OpenHands output's first record, its first observation's kind made an object."""
    shipped = Path(__file__).parent.parent / "examples" / "openhands__multi-swe-bench__output.jsonl"
    first = next(line for line in shipped.read_text("utf-8").splitlines() if line.strip())
    record = json.loads(first)
    index = next(i for i, event in enumerate(record["history"]) if "observation" in event)
    record["history"][index]["observation"] = {"kind": "run"}
    path.write_text(json.dumps(record) + "\n", "utf-8")
    return path


@pytest.mark.parametrize(
    ("name", "content", "fmt", "expected"),
    [
        (
            "lc1.json",
            [{"type": [], "data": {"content": "x"}}],
            "langchain",
            "lc1.json: messages[0]: unknown message type []; expected human, ai, system, tool or chat",
        ),
        (
            "lc2.json",
            [
                {
                    "type": "ai",
                    "data": {"content": [{"type": "tool_call", "id": {"a": 1}, "name": "f", "args": {}}]},
                }
            ],
            "langchain",
            "lc2.json: messages[0]: content[0]: a tool_call part's 'id' must be a string; found dict",
        ),
        (
            "oh.jsonl",
            None,
            "openhands",
            "oh.jsonl:1: history[3]: an observation must be a string naming its kind; found dict",
        ),
    ],
)
def test_an_object_where_a_name_goes_is_one_clear_line(
    tmp_path: Path, name: str, content: Any, fmt: str, expected: str
) -> None:
    """Before: TypeError: unhashable type (a traceback) from a set lookup of the object."""
    path = tmp_path / name
    if content is None:
        _openhands_with_object_observation(path)
    else:
        path.write_text(json.dumps(content), "utf-8")
    result = cli("import", path, "--store", tmp_path / "s.db", "--format", fmt)
    assert result.exit_code == 1
    line = _one_error_line(result.stderr)
    assert (
        line
        == f"compaction: error: {tmp_path}/{expected}; fix it, or skip such lines with --lenient (lenient=True in Python)"
    )
