"""``compaction inspect`` and ``compaction show``: see what a compiled context is made of.

A thin shell over :mod:`compaction.inspect` (the data) and :mod:`compaction.inspect_html`
(the page).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from .errors import CompactionError
from .formats._shown import printable
from .inspect import TEXT_LIMIT, find_summary, inspect_store, message_text, terminal_safe, truncate
from .model_windows import MAX_BUDGET_TOKENS
from .outputs import REQUEST_FORMATS

__all__ = ["inspect_command", "show_command"]

BOOL = click.Choice(["true", "false"], case_sensitive=False)
CONVERSATION_HELP = (
    "The conversation (or branch) of the store to use; optional while the store holds one "
    "(see compaction conversations)."
)


def _model_name(context: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Check ``--model`` as run and compile do: an empty or blank name is a usage error naming the
    option (exit 2), not a recipe error blaming ``<replace>`` (:func:`compaction.cli._model_name`)."""
    from .cli import _model_name as check  # lazily: cli imports this module

    return check(context, param, value)


@click.command("inspect")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="SQLite store file, or a postgresql:// store URL.")
@click.option("--budget", type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS), help="Token budget of the request (default: the recipe's).")
@click.option("--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Recipe (TOML) with the settings.")
@click.option("--to", "output_format", type=click.Choice(list(REQUEST_FORMATS)), help="Request format.")
@click.option("--model", callback=_model_name, help="Model named in the request (also selects image pricing).")
@click.option("--vision", type=BOOL, help="false: replace every image by a placeholder.")
@click.option(
    "--tools",
    "tools_path",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON array of tool definitions offered to the model; they count against the budget.",
)
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write the page to this HTML file.")
@click.option("--json", "as_json", is_flag=True, help="Print the same data as JSON.")
@click.option("--conversation", help=CONVERSATION_HELP)
def inspect_command(
    store_path: str,
    budget: int | None,
    recipe_path: str | None,
    output_format: str | None,
    model: str | None,
    vision: str | None,
    tools_path: str | None,
    html_path: str | None,
    as_json: bool,
    conversation: str | None,
) -> None:
    """Show what the next compiled request is made of, as a self-contained HTML page or JSON.

    It compiles exactly as `compaction compile` does (nothing is summarized, the store is not
    changed) and shows: a timeline of the store (which messages are raw, masked or
    summarized, and the range and level of each shown summary), each summary's text and
    provenance, the ask ledger, every placeholder with its reason, and the request's token
    composition, whose parts add up to the request's tokens. The page has no script and
    loads nothing; hover a message for its token counts.
    """
    from .cli import _errors, _load_tools, _recipe, _require_budget
    from .inspect_html import render_html
    from .store.factory import open_store

    if not html_path and not as_json:
        raise click.UsageError("say what to write: --html FILE, --json, or both")
    with _errors():
        recipe = _require_budget(
            _recipe(recipe_path, budget_tokens=budget, output_format=output_format, model=model, vision=vision)
        )
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        data = inspect_store(store, recipe, tools=_load_tools(tools_path))
    if data.prefill_refused is not None:
        click.echo(
            f"warning: the request ends on an assistant turn, which compaction compile refuses: {data.prefill_refused}",
            err=True,
        )
    with _errors():
        if html_path:
            Path(html_path).write_text(render_html(data), encoding="utf-8")
    if as_json:
        click.echo(json.dumps(data.to_dict(), ensure_ascii=True))
    if html_path:
        shown = len(data.summaries)
        click.echo(
            f"wrote {printable(str(html_path))}: {data.tokens:,} of {data.budget:,} tokens, {shown} summaries shown, "
            f"live window from seq {data.live_start} of {data.total_messages:,} messages",
            err=as_json,
        )


@click.command("show")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="SQLite store file, or a postgresql:// store URL.")
@click.argument("summary_id", required=False, type=int)
@click.option("--seq", type=click.IntRange(min=0), help="Show the stored message at this seq instead.")
@click.option("--full", is_flag=True, help=f"Print the whole text (default: the first {TEXT_LIMIT:,} characters).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--conversation", help=CONVERSATION_HELP)
def show_command(
    store_path: str, summary_id: int | None, seq: int | None, full: bool, as_json: bool, conversation: str | None
) -> None:
    """Print a summary (SUMMARY_ID: its text, range, level and provenance) or a stored message (--seq N).

    Summary ids are listed by `compaction inspect --json` (and on its page). Control
    characters of stored text are printed as \\xNN, so no escape sequence reaches the terminal.
    """
    from .cli import _errors
    from .store.factory import open_store

    if (summary_id is None) == (seq is None):
        raise click.UsageError("give either a SUMMARY_ID or --seq N")
    limit = None if full else TEXT_LIMIT
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        if summary_id is not None:
            summary = find_summary(store, summary_id)
            text = summary.text if limit is None else truncate(summary.text, limit)
            data = {
                "id": summary.id,
                "level": summary.level,
                "start_seq": summary.start_seq,
                "end_seq": summary.end_seq,
                "provenance": summary.provenance,
                "chars": len(summary.text),
                "text": text,
            }
            header = (
                f"summary #{summary.id} · L{summary.level} · messages {summary.start_seq}–{summary.end_seq - 1} "
                f"({summary.end_seq - summary.start_seq} messages) · {len(summary.text):,} characters"
            )
            extra = [f"{key}: {value}" for key, value in sorted(summary.provenance.items())]
        else:
            assert seq is not None
            n = store.next_seq()
            if seq >= n:
                held = f"it holds seqs 0–{n - 1}" if n else "it holds no messages"
                raise CompactionError(f"--seq {seq}: no such message in {store.path}; {held}")
            message = store.messages(seq, seq + 1)[0]
            whole = message_text(message.content)
            text = whole if limit is None else truncate(whole, limit)
            data = {
                "seq": seq,
                "role": message.role,
                "source_id": message.source_id,
                "meta": message.meta,
                "blocks": [b.get("type") for b in message.content],
                "chars": len(whole),
                "text": text,
            }
            header = f"message {seq} · {message.role} · {len(message.content)} blocks · {len(whole):,} characters"
            extra = [f"source id: {message.source_id}"] if message.source_id else []
            extra += [f"{key}: {value}" for key, value in sorted(message.meta.items())]
    if as_json:
        click.echo(json.dumps(data, ensure_ascii=True, default=str))
        return
    click.echo(terminal_safe(header))
    for line in extra:
        click.echo(f"  {terminal_safe(line)}")
    click.echo("")
    click.echo(terminal_safe(text))
