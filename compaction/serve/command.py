"""The ``compaction serve`` command (click); imports Starlette and uvicorn only when it runs."""

from __future__ import annotations

import click

from ..formats._shown import printable
from ..model_windows import MAX_BUDGET_TOKENS

__all__ = ["serve_command", "serve_stats_command"]


def _upstream_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Refuse an --upstream that is not an http(s) base URL as a usage error (exit 2), before any work."""
    if value is None:
        return value
    from ..errors import InvalidArgument
    from .forwarding import check_upstream_url

    try:
        check_upstream_url(value)
    except InvalidArgument as err:  # the message shows the URL with any password masked
        raise click.BadParameter(str(err).removeprefix("--upstream "), ctx, param) from err
    return value


@click.command("serve")
@click.option("--upstream", required=True, callback=_upstream_url, help="Upstream base URL ending in /v1 (https://api.openai.com/v1, "
              "https://api.anthropic.com/v1, http://localhost:11434/v1).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--store-dir", default="compaction-serve", show_default=True, type=click.Path(file_okay=False),
              help="Directory of the conversation stores and the request ledger.")
@click.option("--recipe", "recipe_path", type=click.Path(exists=True, dir_okay=False), help="Recipe TOML file.")
@click.option("--budget", type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS),
              help="Input budget in tokens for every request (default: the model's window minus max_tokens).")
@click.option("--timeout", "timeout_seconds", default=600.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds for a whole non-streamed answer, or for a stream's headers.")
@click.option("--max-request-mb", default=64.0, show_default=True, type=click.FloatRange(min=0.001),
              help="The largest request body a client may send, in MiB (2^20 bytes): a client resends its "
              "whole history, about 0.75 MB per 1,000 coding-agent messages.")
@click.option("--open-conversations", default=64, show_default=True, type=click.IntRange(min=1),
              help="Conversations whose stores stay open between requests (least recently used closed first).")
def serve_command(
    upstream: str, host: str, port: int, store_dir: str, recipe_path: str | None, budget: int | None,
    timeout_seconds: float, max_request_mb: float, open_conversations: int,
) -> None:
    """Serve an OpenAI Chat / Anthropic Messages proxy that compacts each conversation.

    POST /v1/chat/completions goes to {upstream}/chat/completions and POST /v1/messages to
    {upstream}/messages, with the client's own credentials; each conversation (header
    X-Compaction-Conversation, else a hash of its start) is kept whole in its own store under
    --store-dir and compiled within the budget before it is forwarded.  GET /healthz answers ok.
    """
    from ..cli import _errors, _fail, _recipe

    try:
        from ._run import run_server
    except ImportError as err:
        _fail(RuntimeError(f"compaction serve needs the serve extra (Starlette, uvicorn): "
                           f"pip install 'compaction[serve]' ({err})"))
    with _errors():
        recipe = _recipe(recipe_path)
        run_server(upstream=upstream, store_dir=store_dir, host=host, port=port, recipe=recipe, budget=budget,
                   timeout_seconds=timeout_seconds, max_request_bytes=round(max_request_mb * 1024 * 1024),
                   open_conversations=open_conversations)


@click.command("serve-stats")
@click.argument("store_dir", type=click.Path(file_okay=False))
@click.option("--json", "json_out", is_flag=True, help="Print a JSON list, one object per conversation.")
def serve_stats_command(store_dir: str, json_out: bool) -> None:
    """List the conversations of a compaction serve --store-dir.

    One line per conversation: its id, messages, summaries, compaction events, requests and
    when it was last used (UTC).  Reads only; safe beside a running proxy.
    """
    import json

    from ..cli import _errors
    from .stats import as_json, conversation_stats, format_stats

    with _errors():
        rows = conversation_stats(store_dir)
    if json_out:
        click.echo(json.dumps(as_json(rows)))
    elif rows:
        click.echo(format_stats(rows))
    else:
        click.echo(f"no conversations in {printable(str(store_dir))}", err=True)
