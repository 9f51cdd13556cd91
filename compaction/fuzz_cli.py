"""``compaction fuzz``: the invariant checks of :mod:`compaction.fuzz` on generated histories, from the command line."""

from __future__ import annotations

import json

import click

from .errors import CompactionError
from .formats._shown import printable

__all__ = ["fuzz_command"]


@click.command("fuzz")
@click.option("--examples", type=click.IntRange(min=1), default=200, show_default=True, help="Generated cases to run.")
@click.option("--seconds", type=click.FloatRange(min=0, min_open=True),
              help="Run cases for this many seconds instead of --examples (a failure is shrunk for as long again).")
@click.option("--transcript", "transcripts", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Fuzz mutations of this transcript of yours (repeatable): cut points, images, "
                   "oversized outputs, parallel tool calls.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed; the same seed runs the same cases.")
@click.option("--recipe", "recipe_path", type=click.Path(dir_okay=False), help="Your recipe (default: random recipes).")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="fuzz-failures",
    show_default=True,
    help="Directory a failing case is written to (transcript.json, recipe.toml, case.json).",
)
@click.option("--replay", "replay_dir", type=click.Path(exists=True, file_okay=False), help="Run a saved case again.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fuzz_command(
    examples: int,
    seconds: float | None,
    transcripts: tuple[str, ...],
    seed: int,
    recipe_path: str | None,
    out: str,
    replay_dir: str | None,
    as_json: bool,
) -> None:
    """Check the split and cap invariants on generated agent histories; exit 1 on a failure.

    Each case imports a generated history (tool rounds, parallel calls, reused ids, nested
    and data-URI images, oversized outputs) into an in-memory store, compresses it with the
    offline summarizer, compiles a request and checks: coverage, tool pairing, provider
    grammar, budget (with an independent count), wire caps, no image under vision = false,
    loud placeholders, the store untouched, determinism. With --recipe your settings are kept
    and each case draws its budget (150 up to yours, at most 6,000: the histories are small)
    and chunk size. With --transcript each case is instead a window of one of your
    transcripts (cut where no call is open at the start, anywhere at the end) with up to four
    mutations: an image in a user message, an image nested in a tool result, an oversized tool
    output, a round of parallel tool calls. --seconds N runs cases for N seconds instead of
    --examples. A failure is shrunk by hypothesis to a minimal case, written under --out as a
    transcript plus the recipe that breaks it (case.json says how it was made); --replay DIR
    runs it again. Needs hypothesis: pip install 'compaction[fuzz]'.
    """
    from .cli import _errors, _progress
    from .fuzz import replay_case, run_fuzz
    from .recipe import load_recipe

    if replay_dir:
        with _errors():
            try:
                outcome = replay_case(replay_dir)
            except AssertionError as err:  # InvariantBroken: the case still fails
                raise CompactionError(f"{replay_dir}: still fails: {err}") from None
        click.echo(f"{printable(str(replay_dir))}: every invariant held ({', '.join(outcome.checked)})")
        return
    with _errors(), _progress("fuzzing") as progress:
        recipe = load_recipe(recipe_path) if recipe_path else None
        loaded = None
        if transcripts:
            from .formats import load_transcript

            loaded = [load_transcript(path, lenient=True).messages for path in transcripts]
            empty = [path for path, messages in zip(transcripts, loaded, strict=True) if not messages]
            if empty:
                raise CompactionError(f"{empty[0]}: no messages to fuzz")
        report = run_fuzz(recipe, examples=examples, seconds=seconds, seed=seed, out=out, progress=progress,
                          transcripts=loaded, names=transcripts)
    if as_json:
        click.echo(json.dumps(report.to_dict()))
    else:
        made = f"mutations of {len(transcripts)} transcript{'s' * (len(transcripts) != 1)}, " if transcripts else ""
        click.echo(
            f"{report.cases:,} cases run ({made}seed {seed}) in {report.seconds:.1f} s; "
            f"{report.over_budget:,} over budget (a typed OverBudget, checked)"
        )
        for name, count in report.to_dict()["checked"].items():
            click.echo(f"  {name:<18} {count:>6,} cases")
    failure = report.failure
    if failure is not None:
        where = f"; minimal case written to {failure.saved}" if failure.saved else ""
        click.echo(
            f"compaction: fuzz: {failure.invariant} broken on a history of {len(failure.case.messages)} messages: "
            f"{failure.detail}{where}",
            err=True,
        )
        raise SystemExit(1)
    if not as_json:
        click.echo("no invariant broken")
