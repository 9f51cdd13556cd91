"""The ``compaction`` command: a thin shell over the library.

Each library error becomes one clear line on stderr and exit code 1 (2 for usage errors);
long work shows a progress bar on a terminal and stays quiet in pipes; ``--json`` where a
machine reads the output.
"""

from __future__ import annotations

import difflib
import json
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from . import __version__
from ._files import special_file_problem
from .captions import CaptionReport
from .compactor import Compactor, quarantined_chunks
from .compile import CompiledRequest, raw_history_tokens
from .errors import CompactionError, InvalidArgument
from .events import compile_current
from .formats import FORMATS, NothingRead, load_transcript
from .formats._shown import printable
from .model_names import model_name_problem, shown_model_name
from .model_windows import MAX_BUDGET_TOKENS, known_window
from .outputs import REQUEST_FORMATS, request_format
from .pipeline import (
    NothingReadable,
    append_transcript,
    caption_before_compile,
    compress_and_compile,
    run_pipeline,
)
from .recipe import ENCODING_NAMES, Recipe, load_recipe
from .store import HistoryStore, compaction_claim, describe_sqlite_error, open_store
from .store.factory import conversation_holding
from .summarizers._focus import focus_text
from .summarizers.factory import summarizer_from_recipe
from .tools import parse_tools_json
from .wire import unknown_blocks_shipped

BOOL = click.Choice(["true", "false"], case_sensitive=False)


def _fail(err: Exception) -> None:
    """Print ``err`` as one line on stderr (each character that does not print escaped: a file
    name may hold a line break or a terminal escape) and exit 1."""
    click.echo(f"compaction: error: {printable(str(err))}", err=True)
    sys.exit(1)


@contextmanager
def _errors() -> Iterator[None]:
    try:
        yield
    except (NothingRead, NothingReadable) as err:  # what was skipped first, then the error's one line
        _echo_skipped(err.skipped, err.problems, failed=True)
        _fail(err)
    except CompactionError as err:
        _fail(err)
    except OSError as err:
        _fail(err)
    except sqlite3.Error as err:  # the store translates its errors; this is the last guard
        _fail(Exception(f"the store failed: {describe_sqlite_error(err, ':memory:')}"))


@contextmanager
def _progress(label: str) -> Iterator[Any]:
    """Yield a ``progress(done, total)`` callback: a bar on a terminal, nothing in a pipe."""
    if not sys.stdout.isatty():
        yield None
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _print_table(title: str, rows: list[tuple[str, str]]) -> None:
    """Print a two-column table (what, value) with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in rows:
        table.add_row(what, value)
    Console().print(table)


def _recipe(path: str | None, **overrides: Any) -> Recipe:
    recipe = load_recipe(path) if path else Recipe()
    changes = {k: v for k, v in overrides.items() if v is not None}
    if "vision" in changes:
        changes["vision"] = changes["vision"].lower() == "true"
    if "summary_focus" in changes:
        focus_text(changes["summary_focus"])  # refuse an over-long focus in one line
    return recipe.replace(**changes) if changes else recipe


def _require_budget(recipe: Recipe) -> Recipe:
    """Return ``recipe``, or stop with a usage error (exit 2) when it names no token budget.

    The commands that compile a request (run, compile, inspect, eval, replay) check this before
    any work, so a missing ``--budget`` is a usage error like a missing required option, not
    the library's :class:`~compaction.errors.OverBudget` after an import (exit 1); so is a
    budget over :data:`~compaction.model_windows.MAX_BUDGET_TOKENS`.  A budget over the named
    model's known window is warned about (:func:`_warn_budget_over_window`).
    """
    if recipe.budget_tokens is None:
        raise click.UsageError("a token budget is required: give --budget N, or budget_tokens in the --recipe file")
    if recipe.budget_tokens > MAX_BUDGET_TOKENS:  # a recipe file's (--budget is checked by its type)
        raise click.UsageError(
            f"budget_tokens {recipe.budget_tokens:,} is absurd: at most {MAX_BUDGET_TOKENS:,} tokens, "
            "about 100 times the largest context window known"
        )
    _warn_budget_over_window(recipe)
    return recipe


def _warn_budget_over_window(recipe: Recipe) -> None:
    """Warn in one line on stderr when the budget exceeds the named model's known context window.

    Only a model named (``--model`` or the recipe's ``model``) whose window
    :func:`compaction.model_windows.known_window` knows is checked; the budget is kept (a user
    may know a larger window than the table), so this never fails.
    """
    window = known_window(recipe.model)
    budget = recipe.budget_tokens
    if window is not None and budget is not None and budget > window:
        click.echo(
            f"warning: the budget of {budget:,} tokens exceeds the {window:,}-token context window of "
            f"{printable(recipe.model or '')} by {budget - window:,} tokens; a request that fills it would be refused",
            err=True,
        )


def _refuse_both(budget: int | None, name: str) -> None:
    """Stop with a usage error (exit 2) when an option that applies only without --budget is given with it.

    ``name`` is the option's parameter name (``keep_tail_tokens``); given on the command line
    beside ``--budget`` it would be ignored, silently.
    """
    context = click.get_current_context()
    if budget is not None and context.get_parameter_source(name) == click.core.ParameterSource.COMMANDLINE:
        option = "--" + name.replace("_", "-")
        raise click.UsageError(
            f"{option} applies only without --budget (with --budget, compress summarizes what a request "
            "of that many tokens needs); give one of them"
        )


def _model_name(_context: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Check ``--model``: an empty or blank name is a usage error naming the option (exit 2), and
    so is one holding a character that does not print (a line break, a tab, a terminal escape, a
    zero-width space or another invisible one: ``str.isprintable``, the space aside) or one longer
    than 256 characters (:func:`compaction.model_names.model_name_problem`), which no provider's
    model is named with and which would ship in the request's ``model``.

    It was passed on to the recipe, whose error named the recipe file (or ``<replace>``) for a key
    the file did not set.
    """
    if value is not None and not value.strip():
        raise click.BadParameter(f"expected a model name, found {value!r}")
    problem = model_name_problem(value) if value is not None else None
    if value is not None and problem:
        raise click.BadParameter(f"expected a model name, found {shown_model_name(value)}: {problem}")
    return value


def _encoding_name(_context: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """Check ``--encoding`` of run and compile: a name that is neither a known encoding nor
    ``hf:PATH`` is a usage error naming the option (exit 2), with the nearest known name.

    It was passed on to the recipe, whose error named ``<replace>`` and the recipe key
    ``encoding`` rather than the option typed (an ``hf:`` file is loaded, and refused with its
    path, where the recipe is made).
    """
    if value is None or value in ENCODING_NAMES or value.startswith("hf:"):
        return value
    near = difflib.get_close_matches(value, ENCODING_NAMES, n=1, cutoff=0.5)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    raise click.BadParameter(
        f"unknown encoding {shown_model_name(value)}: expected {' or '.join(ENCODING_NAMES)}, "
        f"or hf:/path/to/tokenizer.json{hint}"
    )


#: ``--encoding`` of run and compile (count has its own default).
ENCODING_HELP = (
    "Encoding of the counts: o200k_base, cl100k_base, or hf:/path/to/tokenizer.json for a local "
    "model (append #llama3, #chatml, #mistral or #none to name its chat template; default: detected)."
)


def _request_settings(
    budget: int | None, output_format: str | None, model: str | None, vision: str | None, max_live_images: int | None
) -> dict[str, Any]:
    """Return the recipe overrides the request options of `run` and `compile` give."""
    return {
        "budget_tokens": budget,
        "output_format": output_format,
        "model": model,
        "vision": vision,
        "max_live_images": max_live_images,
    }


def _implementation() -> str:
    """Return which implementation of each native kernel is active (``c`` or ``py``)."""
    from .tokens import estimate, fast

    return f"fast path {fast.IMPLEMENTATION}, estimator {estimate.IMPLEMENTATION}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, message=f"%(prog)s %(version)s ({_implementation()})")
def main() -> None:
    """Keep long-running LLM agents inside their context window without losing what they said.

    Import a transcript into a store, compress it into a hierarchy of summaries, and compile
    the next model request under a token budget.  `compaction run` does all of it at once.
    """


def _load_tools(path: str | None) -> list[Any]:
    """Read tool definitions (a JSON array, OpenAI or Anthropic shape) from ``path``."""
    if not path:
        return []
    special = special_file_problem(path, "a tool list")
    if special is not None:  # /dev/zero or a pipe: read to an end that never comes
        raise InvalidArgument(special)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise CompactionError(f"{path}: tool definitions must be a JSON array in UTF-8: {err}") from None
    return parse_tools_json(text, path)


tools_option = click.option(
    "--tools",
    "tools_path",
    type=click.Path(exists=True, dir_okay=False),
    help="JSON array of tool definitions offered to the model (OpenAI or Anthropic shape); they count against the budget.",
)

recipe_option = click.option(
    "--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Recipe (TOML) with the settings."
)
store_option = click.option(
    "--store", "store_path", required=True, type=click.Path(dir_okay=False),
    help="SQLite store file, or a PostgreSQL store: postgresql://[user@]host[:port]/DATABASE?store=NAME."
)
conversation_option = click.option(
    "--conversation",
    help="The conversation (or branch) of the store to use; optional while the store holds one "
    "(see compaction conversations).",
)
focus_option = click.option(
    "--focus",
    help="What summaries should keep first (recipe summary_focus); sent in every summary and merge prompt.",
)


@main.command("import")
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False))
@store_option
@click.option(
    "--format",
    "input_format",
    type=click.Choice(FORMATS),
    help="Transcript format (default: detected from the content).",
)
@click.option("--lenient", is_flag=True, help="Skip malformed lines or messages and report how many.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report.")
@click.option(
    "--conversation", help="The conversation to append to (default: the transcript file's name without its suffix)."
)
@click.option(
    "--branches",
    is_flag=True,
    help="pi session trees, Claude Code rewinds and sidechains: import the branches the session left too, "
    "each a branch of the conversation.",
)
def import_command(
    transcript: str,
    store_path: str,
    input_format: str | None,
    lenient: bool,
    as_json: bool,
    conversation: str | None,
    branches: bool,
) -> None:
    """Append a transcript's messages to a store, in a conversation of its own (importing it again adds nothing)."""
    with _errors():
        parsed = load_transcript(transcript, format=input_format, lenient=lenient)
        if conversation is None:  # the one holding this transcript already, else one named after the file
            held = conversation_holding(store_path, parsed.messages[0], parsed.format) if parsed.messages else None
            conversation = held or Path(transcript).stem
        branch_notes: list[str] = []
        if branches:  # a Claude Code session's main conversation is its active path
            from .branch_import import plan_branches, session_main

            parsed, branch_notes = session_main(store_path, transcript, conversation, parsed, lenient)
            # every branch is parsed before anything is stored: one that fails leaves the store as it was
            plan = plan_branches(store_path, transcript, conversation, parsed.format, lenient)
    with _errors(), open_store(store_path, conversation=conversation) as store:
        added = append_transcript(store, transcript, parsed)
        store.check_location()
        report = {
            "format": parsed.format,
            "messages": len(parsed.messages),
            "added": added,
            "skipped": parsed.skipped,
            "problems": parsed.problems,
            "unknown_blocks": parsed.unknown_blocks,
            "read": parsed.read.to_json(),
            "store_messages": len(store),
            "conversation": store.conversation,
        }
    if branches:
        from .branch_import import store_branches

        with _errors():
            made, notes = store_branches(store_path, plan)
        made_branches = [b.to_json() for b in made]
        report["branches"] = made_branches
        branch_notes += notes
        report["branch_notes"] = branch_notes
    for note in branch_notes if branches else []:
        click.echo(printable(note), err=True)
    if as_json:
        click.echo(json.dumps(report))
        return
    click.echo(
        f"{printable(transcript)}: {parsed.format}, {parsed.read.describe()}; {added} added "
        f"({report['store_messages']} in conversation {report['conversation']!r} of the store)"
    )
    for made_branch in made_branches if branches else []:
        origin = (
            f"from {made_branch['parent']!r} at message {made_branch['fork_seq']}"
            if made_branch["parent"] is not None
            else "a conversation of its own"
        )
        click.echo(
            f"  {made_branch['kind']} {made_branch['name']}: {origin}, "
            f"{made_branch['messages']} messages, {made_branch['added']} added"
        )
        if made_branch["note"]:
            click.echo(f"    ({printable(made_branch['note'])})")
    if parsed.unknown_blocks:  # kept verbatim, rendered by the loud default rule: say so
        kinds = ", ".join(f"{count} {kind}" for kind, count in parsed.unknown_blocks.items())
        click.echo(f"unknown blocks kept verbatim: {kinds}", err=True)
    if parsed.skipped:
        others = len(parsed.problems) - parsed.skipped  # re-links and left-out branches beside them
        click.echo(
            f"skipped {parsed.skipped} malformed line{'s' if parsed.skipped != 1 else ''}"
            + (f", and {others} note{'s' if others != 1 else ''}:" if others > 0 else ":"),
            err=True,
        )
    elif parsed.problems:
        click.echo("notes:", err=True)
    for problem in parsed.problems:  # every skipped line, re-link and left-out branch: nothing lost silently
        click.echo(f"  {printable(problem)}", err=True)


@main.command()
@store_option
@recipe_option
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS),
    help="Compress as much as a request of N tokens needs (then check that it fits).",
)
@click.option(
    "--keep-tail-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Without --budget: leave this many of the newest tokens unsummarized.",
)
@click.option("--vision", type=BOOL, help="false: no image reaches the summarizer (placeholders).")
@focus_option
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON report: l1_added, merged (level -> count), failures, quarantined, requests sent, "
    "max_request_tokens, with --budget the fitted request's tokens, and with caption_images the captions "
    "made, failed and waiting.",
)
@conversation_option
def compress(
    store_path: str,
    recipe_path: str | None,
    budget: int | None,
    keep_tail_tokens: int,
    vision: str | None,
    focus: str | None,
    as_json: bool,
    conversation: str | None,
) -> None:
    """Summarize closed chunks into level-1 summaries and merge them upward.

    With --budget, compress only as much as a request of that many tokens needs.
    """
    _refuse_both(budget, "keep_tail_tokens")
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store, compaction_claim(store), _progress("compressing") as progress:
        recipe = _recipe(recipe_path, vision=vision, budget_tokens=budget, summary_focus=focus)
        fitted = None
        captions = _caption_images(store, recipe)
        if budget is not None:
            # compressing to fit a budget is not sending the request: a store that ends on the
            # assistant's turn is compressed whatever its model's prefill policy (compaction.prefill)
            fitted, reports = compress_and_compile(store, recipe.replace(assistant_prefill="allow"), progress=progress)
        else:
            summarizer = summarizer_from_recipe(recipe)
            try:
                reports = [
                    Compactor(store, recipe, summarizer).tick(
                        keep_tail_tokens=keep_tail_tokens, progress=progress
                    )
                ]
            finally:
                summarizer.close()
        store.check_location()
    merged: dict[int, int] = {}
    for report in reports:
        for level, count in report.merged.items():
            merged[level] = merged.get(level, 0) + count
    data: dict[str, Any] = {
        "l1_added": sum(r.l1_added for r in reports),
        "merged": merged,
        "failures": sum(r.failures for r in reports),
        "quarantined": sum(r.quarantined for r in reports),
        "requests": sum(r.requests for r in reports),
        "max_request_tokens": max((r.max_request_tokens for r in reports), default=0),
    }
    if fitted is not None:
        data["request_tokens"] = fitted.tokens
    if captions is not None:
        data["captions"] = captions.to_json()
    if as_json:
        click.echo(json.dumps(data))
        return
    levels = ", ".join(f"L{k}: {v}" for k, v in sorted(merged.items())) or "none"
    line = f"L1 summaries added: {data['l1_added']}; merges: {levels}; failures: {data['failures']}"
    if captions is not None and captions.note is None:
        line += f"; image captions made: {captions.made}, failed: {captions.failed}, waiting: {captions.pending}"
    if data["quarantined"]:
        line += f"; quarantined: {data['quarantined']} (offline stand-in summaries; see compaction stats)"
    if fitted is not None:
        line += f"; a request now fits in {fitted.tokens:,} of {budget:,} tokens"
    click.echo(line)


def _caption_images(store: HistoryStore, recipe: Recipe) -> CaptionReport | None:
    """Caption up to 32 live images without a caption when the recipe asks (``caption_images``)."""
    if not recipe.caption_images:
        return None
    summarizer = summarizer_from_recipe(recipe)
    try:
        return caption_before_compile(store, recipe, summarizer, limit=32)
    finally:
        summarizer.close()


def _write_out(out: str, payload: bytes) -> None:
    """Write a request body to ``out``; a path that cannot be written fails in one line."""
    try:
        Path(out).write_bytes(payload)
    except OSError as err:
        _fail(Exception(f"cannot write --out {out}: {err.strerror or err}"))


def _write_request(compiled: CompiledRequest, out: str | None) -> None:
    if out:
        _write_out(out, compiled.request.payload)
    else:
        sys.stdout.buffer.write(compiled.request.payload + b"\n")


@main.command("compile")
@store_option
@recipe_option
@click.option("--budget", type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS), help="Token budget of the request.")
@click.option("--to", "output_format", type=click.Choice(list(REQUEST_FORMATS)), help="Request format.")
@click.option("--model", callback=_model_name, help="Model named in the request (also selects image pricing).")
@click.option("--vision", type=BOOL, help="false: replace every image by a placeholder.")
@click.option("--max-live-images", type=click.IntRange(min=0), help="Ship at most K images (newest first).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the request JSON here (default: stdout).")
@click.option("--encoding", callback=_encoding_name, help=ENCODING_HELP)
@tools_option
@conversation_option
def compile_command(
    store_path: str,
    recipe_path: str | None,
    budget: int | None,
    output_format: str | None,
    model: str | None,
    vision: str | None,
    max_live_images: int | None,
    out: str | None,
    encoding: str | None,
    tools_path: str | None,
    conversation: str | None,
) -> None:
    """Compile the store into the next model request within the token budget."""
    target = _request_settings(budget, output_format, model, vision, max_live_images)
    with _errors():
        recipe = _require_budget(_recipe(recipe_path, **target, encoding=encoding))
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        compiled = compile_current(store, recipe, tools=_load_tools(tools_path))
    _write_request(compiled, out)
    if out:
        click.echo(f"wrote {printable(out)}: {compiled.tokens:,} tokens of {compiled.budget:,}", err=True)


@main.command()
@click.option(
    "--store", "store_path", type=click.Path(dir_okay=False),
    help="SQLite store file, or a PostgreSQL store: postgresql://[user@]host[:port]/DATABASE?store=NAME.",
)
@click.option(
    "--store-dir", "store_dir", type=click.Path(file_okay=False),
    help="A compaction serve --store-dir: list its conversations instead (as compaction serve-stats does).",
)
@recipe_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@conversation_option
def stats(
    store_path: str | None, store_dir: str | None, recipe_path: str | None, as_json: bool, conversation: str | None
) -> None:
    """Show what a store holds: messages, tokens, summaries per level, images, failures, quarantined chunks.

    With --store-dir, list the conversations of a compaction serve directory instead.
    """
    if (store_path is None) == (store_dir is None):
        raise click.UsageError("give one of --store DB (a store) or --store-dir DIR (a compaction serve directory)")
    if store_dir is not None:
        from .serve.command import serve_stats_command

        click.get_current_context().invoke(serve_stats_command, store_dir=store_dir, json_out=as_json)
        return
    assert store_path is not None
    with _errors(), open_store(store_path, create=False, conversation=conversation) as store:
        recipe = _recipe(recipe_path)
        levels: dict[int, int] = {}
        store_summaries = store.summaries()
        for summary in store_summaries:
            levels[summary.level] = levels.get(summary.level, 0) + 1
        quarantined = quarantined_chunks(store)
        data = {
            "conversation": store.conversation,
            "messages": len(store),
            "raw_tokens": raw_history_tokens(store, recipe),
            "encoding": recipe.encoding,
            "summaries": {str(k): v for k, v in sorted(levels.items())},
            "image_blobs": store.image_count(),
            "failures": (failures := store.failures()),
            "quarantined": [
                {
                    "level": q.level,
                    "start_seq": q.start_seq,
                    "end_seq": q.end_seq,
                    "failures": q.failures,
                    "last_reason": q.last_reason,
                    "failed_summarizer": q.failed_summarizer,
                }
                for q in quarantined
            ],
        }
    if as_json:
        click.echo(json.dumps(data))
        return
    rows = [
        ("messages", str(data["messages"])),
        (f"tokens raw ({recipe.encoding})", f"{data['raw_tokens']:,}"),
    ]
    rows += [(f"L{level} summaries", str(count)) for level, count in sorted(levels.items())]
    summaries = store_summaries
    still_raw = {
        (f["level"], f["start_seq"], f["end_seq"])
        for f in failures
        if not any(s.level == f["level"] and s.start_seq <= f["start_seq"] < s.end_seq for s in summaries)
    }
    rows += [
        ("image blobs", str(data["image_blobs"])),
        ("chunks left raw (summarizer failures)", f"{len(still_raw)} ({len(failures)} failed attempts)"),
        ("  of those attempts, outages (not counted)", str(sum(f["kind"] == "outage" for f in failures))),
        ("quarantined (offline stand-in summaries)", str(len(quarantined))),
    ]
    rows += [
        (f"  L{q.level} messages {q.start_seq}–{q.end_seq - 1}", f"{q.failures} failures; last: {q.last_reason[:80]}")
        for q in quarantined
    ]
    _print_table(f"store {printable(store_path)}, conversation {data['conversation']!r}", rows)


@main.command()
@click.argument("transcript", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--budget",
    type=click.IntRange(min=1, max=MAX_BUDGET_TOKENS),
    help="Token budget of the request (required here or in the recipe).",
)
@recipe_option
@click.option("--vision", type=BOOL, help="false: a text-only model; every image becomes a placeholder.")
@click.option("--max-live-images", type=click.IntRange(min=0), help="Ship at most K images (newest first).")
@click.option("--out", type=click.Path(dir_okay=False), help="Write the request JSON here.")
@click.option(
    "--to",
    "output_format",
    type=click.Choice(list(REQUEST_FORMATS)),
    help="Request format (default openai).",
)
@click.option("--model", callback=_model_name, help="Model named in the request (also selects image pricing).")
@click.option(
    "--format", "input_format", type=click.Choice(FORMATS), help="Transcript format (default: detected)."
)
@click.option(
    "--store",
    "store_path",
    default=":memory:",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="Keep the store in this SQLite file.",
)
@click.option("--lenient", is_flag=True, help="Skip malformed lines or messages and report how many.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@click.option("--encoding", callback=_encoding_name, help=ENCODING_HELP)
@tools_option
@focus_option
@conversation_option
def run(
    transcript: str,
    budget: int | None,
    recipe_path: str | None,
    vision: str | None,
    max_live_images: int | None,
    out: str | None,
    output_format: str | None,
    model: str | None,
    input_format: str | None,
    store_path: str,
    lenient: bool,
    as_json: bool,
    encoding: str | None,
    tools_path: str | None,
    focus: str | None,
    conversation: str | None,
) -> None:
    """Import TRANSCRIPT, compress it and compile a request within --budget tokens."""
    target = _request_settings(budget, output_format, model, vision, max_live_images)
    with _errors():
        recipe = _require_budget(_recipe(recipe_path, **target, summary_focus=focus, encoding=encoding))
    with _errors(), _progress("compressing") as progress:
        result = run_pipeline(  # NothingReadable: _errors lists what was skipped, then the error
            transcript,
            recipe,
            store_path=store_path,
            format=input_format,
            lenient=lenient,
            progress=progress,
            tools=_load_tools(tools_path),
            conversation=conversation,
        )
    compiled = result.compiled
    if out:
        _write_out(out, compiled.request.payload)
    shown_levels: dict[int, int] = {}
    for summary in compiled.summaries:
        shown_levels[summary.level] = shown_levels.get(summary.level, 0) + 1
    unknown_shipped = unknown_blocks_shipped(compiled.request, recipe.encoding)
    unknown_tokens = sum(tokens for _count, tokens in unknown_shipped.values())
    if compiled.tokens and unknown_tokens / compiled.tokens > 0.01:
        kinds = ", ".join(f"{count} {kind}" for kind, (count, _tokens) in unknown_shipped.items())
        title = request_format(compiled.request.format).title
        click.echo(
            f"warning: blocks of types the {title} request format does not take ship as loud JSON text, "
            f"{unknown_tokens:,} tokens ({unknown_tokens / compiled.tokens:.1%} of the request): {kinds}",
            err=True,
        )
    if result.held and result.added and result.added == len(result.transcript.messages):
        # no message of the transcript was in the conversation: most likely another transcript
        click.echo(
            f"warning: none of the {result.added:,} messages of {printable(transcript)} was in the store's "
            f"conversation, which held {result.held:,} messages: they were appended after those, and the "
            "request compiles both; to keep another transcript apart give --conversation NAME "
            "(compaction import puts each transcript in its own)",
            err=True,
        )
    report = {
        "transcript": transcript,
        "format": result.transcript.format,
        "messages": compiled.total_messages,
        "skipped": result.transcript.skipped,
        "read": result.transcript.read.to_json(),
        "unknown_blocks": result.transcript.unknown_blocks,
        "tokens_before": result.tokens_before,
        "tokens_after": compiled.tokens,
        "budget": compiled.budget,
        "summaries": {str(k): v for k, v in sorted(result.summaries_per_level.items())},
        "summaries_shown": {str(k): v for k, v in sorted(shown_levels.items())},
        "live_window_messages": compiled.total_messages - compiled.live_start,
        "masked_messages": len(compiled.masked_seqs),
        "ask_ledger_tokens": compiled.ledger_tokens,
        "blocks_not_carried": _dropped_counts(compiled.request.dropped),
        "unknown_blocks_shipped": {
            kind: {"count": count, "tokens": tokens} for kind, (count, tokens) in unknown_shipped.items()
        },
        "images_shown": compiled.request.images_shown,
        "images_replaced": compiled.request.images_replaced,
        "problems": result.transcript.problems,
        "request_format": compiled.request.format,
        "calibration": result.calibration.to_json() if result.calibration else None,
        "out": out,
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        click.echo(json.dumps(report))
        return
    request = compiled.request
    rows = [
        ("format", result.transcript.format),
        ("messages", f"{compiled.total_messages:,}"),
        ("read", result.transcript.read.describe()),
        (
            f"tokens before ({recipe.encoding})",
            f"{result.tokens_before:,} (the whole history as one {compiled.request.format} request)",
        ),
        ("tokens after", f"{compiled.tokens:,} (budget {compiled.budget:,})"),
    ]
    if result.calibration:
        fit = result.calibration
        rows.append((
            "calibration",
            f"{fit.model} x{fit.factor:.4f} ({fit.samples} samples, fit {fit.version}):"
            f" budget {recipe.budget_tokens or 0:,} -> {compiled.budget:,}",
        ))
    rows += [
        (f"L{level} summaries (shown)", f"{count} ({shown_levels.get(level, 0)})")
        for level, count in sorted(result.summaries_per_level.items())
    ]
    rows += [
        ("live window", _live_window(compiled)),
        ("ask ledger", f"{compiled.ledger_tokens:,} tokens (asks and names index)" if compiled.ledger_tokens else "none (no asks summarized)"),
        ("images shown / replaced", f"{request.images_shown} / {request.images_replaced}"),
    ]
    if unknown_shipped:
        rows.append(
            (
                "unknown blocks shipped as text",
                f"{sum(c for c, _t in unknown_shipped.values())} ({unknown_tokens:,} tokens, "
                f"{unknown_tokens / max(compiled.tokens, 1):.1%})",
            )
        )
    dropped = _dropped_counts(request.dropped)
    if dropped:
        rows.append(
            (
                f"blocks {request.format} cannot carry (not sent)",
                ", ".join(f"{count} {kind}" for kind, count in dropped.items()),
            )
        )
    rows += [
        (
            "request",
            f"{request.format} -> {printable(out)}" if out else f"{request.format} (not written: use --out FILE)",
        ),
        ("time", f"{result.seconds:.2f} s"),
    ]
    _print_table(f"compaction run: {printable(transcript)}", rows)
    _echo_skipped(result.transcript.skipped, result.transcript.problems)


#: How many ``path:line: what`` lines ``run`` prints of what a lenient parse skipped.
_SKIPPED_LISTED = 5


def _echo_skipped(skipped: int, problems: list[str], command: str = "run", *, failed: bool = False) -> None:
    """Print to stderr what a lenient parse skipped: a count, then the first
    :data:`_SKIPPED_LISTED` of its ``path:line: what`` lines (skipped lines and the notes beside
    them, in file order) and how many more; nothing when no line was skipped.  ``<command>
    --json`` (``run``, ``replay``, ``eval``) and ``compaction import --lenient`` give every line,
    except when the command ``failed`` because nothing could be read (no command lists more
    then: the "more" line says how many, and no more)."""
    if not skipped:
        return
    others = len(problems) - skipped  # re-links and left-out branches beside them
    click.echo(
        f"skipped {skipped} malformed line{'s' if skipped != 1 else ''}"
        + (f", and {others} note{'s' if others != 1 else ''}:" if others > 0 else ":"),
        err=True,
    )
    for problem in problems[:_SKIPPED_LISTED]:
        click.echo(f"  {printable(problem)}", err=True)
    if len(problems) > _SKIPPED_LISTED:
        where = "" if failed else f" ({command} --json or compaction import --lenient lists them all)"
        click.echo(f"  ... and {len(problems) - _SKIPPED_LISTED} more{where}", err=True)


def _live_window(compiled: Any) -> str:
    """Describe the live window: its messages, and how many show masked tool outputs."""
    shown = compiled.total_messages - compiled.live_start
    masked = len(compiled.masked_seqs)
    return f"{shown} messages ({masked} with tool outputs masked)" if masked else f"{shown} messages"


def _dropped_counts(dropped: Any) -> dict[str, int]:
    """Count the dropped blocks of a gated request by type."""
    counts: dict[str, int] = {}
    for _index, kind in dropped:
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items()))


@main.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--encoding",
    default="o200k_base",
    show_default=True,
    help="o200k_base, cl100k_base, or hf:/path/to/tokenizer.json (a local model's tokenizer).",
)
@click.option(
    "--method",
    type=click.Choice(["exact", "fast", "estimate"]),
    default="fast",
    show_default=True,
    help="exact: tiktoken; fast: the exact fast path (same counts); estimate: the one-pass estimator.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (files and the total).")
@click.option(
    "--engine",
    type=click.Choice(["local", "dask"]),
    default="local",
    show_default=True,
    help="dask: count partitions of the files on a dask.distributed cluster (the same counts).",
)
@click.option("--workers", type=click.IntRange(min=1), help="With --engine dask: LocalCluster workers (default 2).")
@click.option("--scheduler", help="With --engine dask: a running scheduler's address (workers must see the files).")
@click.option(
    "--store",
    "store_path",
    help=(
        "Count a store's message texts instead of files (an SQLite file or a postgresql:// URL): each "
        "message as `compaction show` prints it, thinking and tool labels included, no request framing "
        "(run's 'tokens before' prices the request instead)."
    ),
)
@click.option("--conversation", help="With --store: the conversation (optional while the store holds one).")
def count(
    files: tuple[str, ...],
    encoding: str,
    method: str,
    as_json: bool,
    engine: str,
    workers: int | None,
    scheduler: str | None,
    store_path: str | None,
    conversation: str | None,
) -> None:
    """Count the tokens of UTF-8 text files, or of a store's messages (--store)."""
    from .fleet.counting import count_files_on_dask, count_partition

    if scheduler is not None and engine != "dask":
        raise click.UsageError("--scheduler needs --engine dask")
    if bool(files) == (store_path is not None):
        raise click.UsageError("give FILES to count, or --store S to count a store's messages (not both)")
    if store_path is not None:
        _count_store(store_path, conversation, encoding, method, as_json, engine, workers, scheduler)
        return
    with _errors():
        special = next(filter(None, (special_file_problem(name, "a file to count") for name in files)), None)
        if special is not None:  # /dev/zero or a pipe: read to an end that never comes
            raise InvalidArgument(special)
        if engine == "dask":
            pairs = count_files_on_dask(files, encoding, method, workers=workers, scheduler=scheduler)
        else:
            pairs = count_partition(files, encoding, method)
    rows = [
        {"file": name, "characters": characters, "tokens": tokens}
        for name, (characters, tokens) in zip(files, pairs, strict=True)
    ]
    total = sum(tokens for _characters, tokens in pairs)
    if as_json:
        click.echo(json.dumps({"encoding": encoding, "method": method, "files": rows, "total": total}))
        return
    for row in rows:
        click.echo(f"{row['tokens']:>10}  {printable(str(row['file']))}")
    if len(rows) > 1:
        click.echo(f"{total:>10}  total")


#: What ``count --store`` counts, printed under its total (the README's *Quick start* reconciles the two).
STORE_COUNT_NOTE = (
    "  (each message's text as `compaction show` prints it: thinking included, tool calls and results "
    "labelled [tool_use NAME ID] / [tool_result ID], no message or request framing; `compaction run`'s "
    "'tokens before' is the request OpenAI Chat would carry instead: framed messages, no thinking)"
)


def _count_store(
    location: str,
    conversation: str | None,
    encoding: str,
    method: str,
    as_json: bool,
    engine: str,
    workers: int | None,
    scheduler: str | None,
) -> None:
    """Count a store's message texts (``compaction count --store``) and print the total."""
    from .fleet.counting import count_store_messages

    with _errors():
        counted = count_store_messages(
            location, encoding, method, conversation=conversation, engine=engine, workers=workers, scheduler=scheduler
        )
    if as_json:
        data = {"encoding": encoding, "method": method, "messages": counted.messages}
        click.echo(json.dumps({**data, "characters": counted.characters, "total": counted.tokens}))
        return
    click.echo(f"{counted.tokens:>10}  tokens of {counted.messages:,} messages' text")
    click.echo(STORE_COUNT_NOTE)


from .eval import eval_command  # noqa: E402  (eval's command reuses _errors and _progress above)

main.add_command(eval_command)

from .replay_cli import replay_command  # noqa: E402  (replay_cli imports this module lazily)

main.add_command(replay_command)

from .inspect_cli import inspect_command, show_command  # noqa: E402  (they import this module lazily)

main.add_command(inspect_command)
main.add_command(show_command)

from .fuzz_cli import fuzz_command  # noqa: E402  (it imports this module lazily)

main.add_command(fuzz_command)

from .bench_cli import bench_command  # noqa: E402  (it imports this module lazily)

main.add_command(bench_command)

from .serve.command import serve_command, serve_stats_command  # noqa: E402  (imports Starlette only when it runs)

main.add_command(serve_command)
main.add_command(serve_stats_command)

from .fleet.cli import fleet_command  # noqa: E402  (it imports this module lazily; dask only when it runs)

main.add_command(fleet_command)

from .conversations_cli import CONVERSATION_COMMANDS  # noqa: E402  (they import this module lazily)

for _command in CONVERSATION_COMMANDS:
    main.add_command(_command)

from .calibrate_cli import calibrate_command  # noqa: E402  (it imports this module lazily)

main.add_command(calibrate_command)


if __name__ == "__main__":  # pragma: no cover
    main()
