"""The inspector's page as a person sees it: rendered by headless Chromium (Debian's ``chromium``).

Chromium is installed by ``.ci/run``, or by the first test here when it is missing (Debian's
package via apt-get), so the README's test command works on a fresh machine; a browser that
cannot be had fails these tests, it never skips them.  Chromium renders the page from a file URL with networking off and dumps the DOM it
built; its console (``--enable-logging=stderr``) must stay empty: no script error, no
blocked request (the page's Content-Security-Policy refuses any load).
"""

from __future__ import annotations

import os
import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path

from inspect_fixtures import HOSTILE, hostile_store

from compaction.inspect import inspect_store
from compaction.inspect_html import render_html

CHROMIUM = Path("/usr/bin/chromium")
CONSOLE = re.compile(r"CONSOLE|Uncaught|Refused to|net::ERR_", re.IGNORECASE)


def _ensure_chromium() -> None:
    """Install Debian's chromium when it is missing (as .ci/run does), so the README's test command
    works on a fresh machine; fail, never skip, when it cannot be had."""
    if CHROMIUM.exists():
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=900)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], capture_output=True, env=env, timeout=1800)
    assert CHROMIUM.exists(), "Debian's chromium is required and apt-get could not install it (apt-get install -y chromium)"


def _chromium(page: Path, profile: Path, *extra: str) -> tuple[str, list[str]]:
    """Return the DOM Chromium built from ``page`` and its console lines."""
    _ensure_chromium()
    command = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, [line for line in done.stderr.splitlines() if CONSOLE.search(line)]


class _Visible(HTMLParser):
    """Collect what a reader sees: text outside head/style, elements by tag and attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.sections: dict[str, list[str]] = {}
        self.text: list[str] = []
        self._section: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.tags.append((tag, attributes))
        if tag == "section" and attributes.get("data-summary-id"):
            self._section = attributes["data-summary-id"]
            self.sections[self._section or ""] = []
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self._section = None
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if "style" in self.stack or "title" in self.stack or "head" in self.stack and "body" not in self.stack:
            return
        self.text.append(data)
        if self._section is not None:
            self.sections[self._section].append(data)


def test_the_console_check_sees_a_script_error(tmp_path: Path) -> None:
    """The check below would catch a console error: a page with one is reported."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><p>x</p><script>console.error("planted"); missing();</script>', "utf-8")
    _dom, console = _chromium(page, tmp_path / "profile", "--dump-dom")
    assert any('"planted"' in line for line in console)
    assert any("missing is not defined" in line for line in console)


def test_chromium_shows_every_summary_and_a_composition_that_adds_up(tmp_path: Path) -> None:
    store, recipe, compiled = hostile_store(tmp_path / "agent.db", 12000, vision=False, output_format="anthropic")
    with store:
        data = inspect_store(store, recipe)
        summaries = store.summaries()
    page = tmp_path / "inspect.html"
    page.write_text(render_html(data), encoding="utf-8")
    dom, console = _chromium(page, tmp_path / "profile", "--dump-dom")
    assert console == []
    seen = _Visible()
    seen.feed(dom)
    seen.close()
    tags = [tag for tag, _attrs in seen.tags]
    assert "script" not in tags and "img" not in tags and tags.count("h1") == 1
    text = "".join(seen.text)
    # every shown summary is on the page with its range, level and text
    assert compiled.summaries and set(seen.sections) == {str(s.id) for s in compiled.summaries}
    for shown in compiled.summaries:
        section = "".join(seen.sections[str(shown.id)])
        assert f"Summary #{shown.id} · L{shown.level} · messages {shown.start_seq}–{shown.end_seq - 1}" in section
        stored = next(s for s in summaries if s.id == shown.id)
        assert stored.text.replace("\x00", "\ufffd")[:300].split("\n")[0] in section
    # the composition table a person reads adds up to the request's tokens
    cells = _table_rows(dom)
    parts = {name: int(tokens.replace(",", "")) for name, tokens, _share in cells}
    assert parts and sum(v for k, v in parts.items() if k != "total") == parts["total"] == compiled.tokens
    bar = [int(a["data-tokens"] or 0) for t, a in seen.tags if t == "div" and a.get("data-part")]
    assert sum(bar) == compiled.tokens
    assert f"The parts add up to {compiled.tokens:,} tokens, equal to the request's {compiled.tokens:,} tokens" in text
    # hostile text reads as text; nothing in it became an element
    assert HOSTILE[0] in text and "FAKE HEADING" in text
    # hover text: each message cell names its tokens
    cells_titles = [a["title"] or "" for t, a in seen.tags if t == "div" and a.get("data-seq") is not None]
    assert len(cells_titles) == data.total_messages
    assert all(re.search(r"message \d+ · \w+ · \w+ · [\d,]+ tokens stored", title) for title in cells_titles)


def _table_rows(dom: str) -> list[tuple[str, str, str]]:
    """Return the composition table's (part, tokens, share) cells as the browser built them."""

    class Table(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.inside = False
            self.rows: list[list[str]] = []
            self.cell: list[str] | None = None

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "table" and ("id", "composition-table") in attrs:
                self.inside = True
            elif self.inside and tag == "tr":
                self.rows.append([])
            elif self.inside and tag in ("td", "th"):
                self.cell = []

        def handle_endtag(self, tag: str) -> None:
            if tag == "table":
                self.inside = False
            elif self.inside and tag in ("td", "th") and self.cell is not None:
                self.rows[-1].append("".join(self.cell).strip())
                self.cell = None

        def handle_data(self, data: str) -> None:
            if self.cell is not None:
                self.cell.append(data)

    table = Table()
    table.feed(dom)
    table.close()
    return [(r[0], r[1], r[2]) for r in table.rows[1:] if len(r) == 3]
