"""``compaction conversations``, ``branch``, ``pin`` and ``edit``: the conversations of one store.

A store holds many conversations; ``compaction import`` puts each transcript in its own
(named after the file), and a branch forks a conversation at a message, sharing the history
before it (no row is copied).  ``run``, ``compress``, ``compile`` and ``stats`` take
``--conversation NAME`` to choose one.  See :mod:`compaction.store.lineage`.
"""

from __future__ import annotations

import json

import click

from .formats._shown import printable

__all__ = ["CONVERSATION_COMMANDS", "branch_command", "conversations_command", "edit_command", "pin_command"]

_STORE_HELP = "SQLite store file, or a PostgreSQL store: postgresql://[user@]host[:port]/DATABASE?store=NAME."


@click.command("conversations")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help=_STORE_HELP)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array: name, id, parent, fork_seq, messages, own_messages, summaries, created_at.",
)
def conversations_command(store_path: str, as_json: bool) -> None:
    """List the conversations of a store with their message and summary counts.

    A branch's counts include what it shares with its parent (its own rows are "own").
    """
    from .cli import _errors
    from .store.factory import list_conversations

    with _errors():
        infos = list_conversations(store_path)
    if as_json:
        click.echo(json.dumps([info.to_json() for info in infos]))
        return
    if not infos:
        shown = printable(store_path)
        click.echo(f"{shown}: no conversation yet (compaction import TRANSCRIPT --store {shown})")
        return
    width = max(len("conversation"), *(len(info.name) for info in infos))
    click.echo(f"{'conversation':<{width}}  {'messages':>8}  {'own':>8}  {'summaries':>9}  branch of")
    for info in infos:
        origin = f"{info.parent} at {info.fork_seq}" if info.parent is not None else "-"
        click.echo(
            f"{info.name:<{width}}  {info.messages:>8}  {info.own_messages:>8}  {info.summaries:>9}  {origin}"
        )


@click.command("branch")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help=_STORE_HELP)
@click.option("--conversation", help="The conversation to fork (optional while the store holds one).")
@click.option(
    "--at",
    "at",
    required=True,
    type=click.IntRange(min=0),
    help="The seq of the first message the branch does not share (it shares messages 0 to AT-1).",
)
@click.option("--name", required=True, help="The new branch's name (unique in the store).")
@click.option("--json", "as_json", is_flag=True, help="Print the branch as JSON.")
def branch_command(store_path: str, conversation: str | None, at: int, name: str, as_json: bool) -> None:
    """Fork a conversation at a message: a new conversation sharing the history before it.

    Nothing is copied; summaries of the shared messages are seen (and made once) for both.
    Append to the branch, compress or compile it with --conversation NAME.
    """
    from .cli import _errors
    from .store.factory import open_store

    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        info = store.branch(name, at)
        parent = store.conversation
        store.check_location()
    if as_json:
        click.echo(json.dumps(info.to_json()))
        return
    shared = f"sharing its messages 0 to {at - 1}" if at > 0 else "sharing no message (it starts empty)"
    click.echo(f"{name}: a branch of {parent!r} {shared} ({info.summaries} summaries)")


@click.command("pin")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help=_STORE_HELP)
@click.option("--conversation", help="The conversation (optional while the store holds one).")
@click.argument("seq", type=click.IntRange(min=0))
@click.option("--unpin", is_flag=True, help="Remove the pin instead.")
@click.option("--json", "as_json", is_flag=True, help="Print the pinned seqs as JSON.")
def pin_command(store_path: str, conversation: str | None, seq: int, unpin: bool, as_json: bool) -> None:
    """Pin message SEQ: every compile of the conversation keeps its text verbatim, counted in the budget.

    Its text joins the system text of each request while it lies before the live window,
    however much of the history around it is summarized (in the window it is shown in its
    place, once); a compile fails with an over-budget error when the pinned text alone does
    not fit. System messages are always pinned.
    """
    from .cli import _errors
    from .store.factory import open_store

    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        changed = store.unpin(seq) if unpin else store.pin(seq)
        pinned = store.pinned_seqs()
        name = store.conversation
        store.check_location()
    if as_json:
        click.echo(json.dumps({"conversation": name, "seq": seq, "changed": changed, "pinned": pinned}))
        return
    if unpin:
        click.echo(f"message {seq} of {name!r}: {'unpinned' if changed else 'was not pinned here'}")
    else:
        click.echo(f"message {seq} of {name!r}: {'pinned' if changed else 'pinned already'}; pinned: {pinned}")


@click.command("edit")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help=_STORE_HELP)
@click.option("--conversation", help="The conversation (optional while the store holds one).")
@click.argument("seq", type=click.IntRange(min=0))
@click.option("--text", "new_text", help="The message's new text (one text block).")
@click.option(
    "--content",
    "content_path",
    type=click.Path(exists=True, dir_okay=False),
    help="A JSON file with the message's new content blocks (a list, the Anthropic Messages shape).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the revision and the summaries made stale as JSON.")
def edit_command(
    store_path: str, conversation: str | None, seq: int, new_text: str | None, content_path: str | None, as_json: bool
) -> None:
    """Edit message SEQ: a new revision of it (the old one is kept); compile shows the newest.

    The summaries that cover the message or follow it are marked stale and made anew by the
    next `compaction compress`.
    """
    from pathlib import Path

    from ._files import special_file_problem
    from .cli import _errors
    from .errors import InvalidArgument
    from .store.factory import open_store

    if (new_text is None) == (content_path is None):
        raise click.UsageError("give one of --text TEXT or --content FILE.json")
    with _errors():
        if content_path is not None:
            special = special_file_problem(content_path, "--content")
            if special is not None:  # /dev/zero or a pipe: read to an end that never comes
                raise InvalidArgument(special)
            try:
                content = json.loads(Path(content_path).read_text(encoding="utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise InvalidArgument(f"{content_path}: not a JSON list of content blocks ({err})") from None
            if not isinstance(content, list) or not all(isinstance(b, dict) and "type" in b for b in content):
                raise InvalidArgument(f"{content_path}: expected a JSON list of content blocks, each with a 'type'")
            warning = _unknown_blocks_warning(content)
        else:
            content = [{"type": "text", "text": new_text}]
            warning = None
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        before = len(store.stale_summaries())
        revision = store.edit(seq, content)
        stale = len(store.stale_summaries()) - before
        name = store.conversation
        store.check_location()
    if warning is not None:  # stored: the store keeps unknown blocks verbatim, so it warns, as import does
        click.echo(warning, err=True)
    if as_json:
        click.echo(json.dumps({"conversation": name, "seq": seq, "revision": revision, "stale_summaries": stale}))
        return
    click.echo(
        f"message {seq} of {name!r}: revision {revision}; {stale} summaries marked stale "
        "(compaction compress makes them anew)"
    )


def _unknown_blocks_warning(content: list[dict[str, object]]) -> str | None:
    """Return one line naming the blocks of an edit no request format knows (kept verbatim, as an
    import keeps them), or ``None`` when every block is known."""
    from .blocks import Message
    from .formats._common import unknown_block_counts

    unknown = unknown_block_counts([Message("user", tuple(content))])
    if unknown:
        kinds = ", ".join(f"{count} {kind}" for kind, count in unknown.items())
        return (
            f"warning: unknown blocks kept verbatim: {kinds} (no request format knows them; each is rendered by "
            "the loud default rule, as an import renders them)"
        )
    return None


#: The commands this module adds to ``compaction`` (registered by :mod:`compaction.cli`).
CONVERSATION_COMMANDS = (conversations_command, branch_command, pin_command, edit_command)
