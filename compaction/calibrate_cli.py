"""``compaction calibrate``: the per-model corrections fitted from the provider's reported usage.

Reads a store's usage records (``--store``: what the compactor's summarizer calls and the
proxy recorded) and, with ``--store-dir``, the proxy's own ledger
(``<store_dir>/requests.sqlite``), and prints per model the samples, the correction compile
applies (see :mod:`compaction.calibration`), the ratios' p10 / p90 and the fit's version.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["calibrate_command"]

_STORE_HELP = "SQLite store file, or a PostgreSQL store: postgresql://[user@]host[:port]/DATABASE?store=NAME."


@click.command("calibrate")
@click.option("--store", "store_path", type=click.Path(dir_okay=False), help=_STORE_HELP)
@click.option("--conversation", help="Only the records made under this conversation (default: every one).")
@click.option(
    "--store-dir",
    "store_dir",
    type=click.Path(file_okay=False),
    help="A compaction serve store directory: its request ledger (requests.sqlite) is read too.",
)
@click.option(
    "--count-tokens",
    "count_tokens_url",
    metavar="BASE_URL",
    help="First record samples from Anthropic's count_tokens endpoint at BASE_URL (e.g. "
    "https://api.anthropic.com/v1): the conversation compiled as Anthropic Messages at a few budgets, "
    "each counted exactly. Needs --store and a key in --api-key-env.",
)
@click.option(
    "--api-key-env",
    default="ANTHROPIC_API_KEY",
    show_default=True,
    help="The environment variable holding the Anthropic key for --count-tokens.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print a JSON array: source, model, samples, correction (null below the minimum), p10, p90, version.",
)
def calibrate_command(
    store_path: str | None,
    conversation: str | None,
    store_dir: str | None,
    count_tokens_url: str | None,
    api_key_env: str,
    as_json: bool,
) -> None:
    """Print per model the correction fitted from the provider's reported usage.

    The correction is the median of (provider input tokens / our count of the request),
    clamped to [0.5, 2.0], from the newest 500 requests; below 5 samples there is none.
    Compile divides the budget by it (recipe calibrate = true, the default).
    """
    from .calibration import MIN_SAMPLES, fits_from_ledger, fits_from_store
    from .cli import _errors
    from .store.factory import open_store
    from .store.lineage import ANY_CONVERSATION

    if store_path is None and store_dir is None:
        raise click.UsageError("name a store (--store DB) or a proxy's store directory (--store-dir DIR)")
    if count_tokens_url is not None and store_path is None:
        raise click.UsageError("--count-tokens records its samples in a store: name it with --store DB")
    rows: list[tuple[str, str, object, int]] = []
    with _errors():
        if count_tokens_url is not None and store_path is not None:
            from .count_tokens import probe_with_count_tokens
            from .recipe import Recipe

            with open_store(store_path, create=False, conversation=conversation) as probed:
                recipe = Recipe(encoding=probed.encoding)
                probe_with_count_tokens(probed, recipe, base_url=count_tokens_url, api_key_env=api_key_env)
        if store_path is not None:
            with open_store(store_path, create=False, conversation=ANY_CONVERSATION) as store:
                rows += [(store_path, m, fit, n) for m, fit, n in fits_from_store(store, conversation)]
        if store_dir is not None:
            ledger = Path(store_dir) / "requests.sqlite"
            rows += [(str(ledger), m, fit, n) for m, fit, n in fits_from_ledger(ledger, conversation)]
    if as_json:
        click.echo(
            json.dumps([_json_row(source, model, fit, samples) for source, model, fit, samples in rows])
        )
        return
    if not rows:
        click.echo(
            "no usage recorded yet: summarizer calls and proxied requests record it as they are answered"
        )
        return
    width = max(len("model"), *(len(model) for _s, model, _f, _n in rows))
    click.echo(
        f"{'model':<{width}}  {'samples':>7}  {'correction':>10}  {'p10':>6}  {'p90':>6}  version  source"
    )
    for source, model, fit, samples in rows:
        data = _json_row(source, model, fit, samples)
        if data["correction"] is None:
            figures = f"{'none':>10}  {'-':>6}  {'-':>6}  {'-':<7}"
            note = f"  (fewer than {MIN_SAMPLES} samples)"
        else:
            clamp = " (clamped)" if data["clamped"] else ""
            figures = (
                f"{data['correction']:>10.4f}  {data['p10']:>6.3f}  {data['p90']:>6.3f}  {data['version']:<7}"
            )
            note = clamp
        click.echo(f"{model:<{width}}  {samples:>7}  {figures}  {source}{note}")


def _json_row(source: str, model: str, fit: object, samples: int) -> dict[str, object]:
    """Return one model's figures as a JSON-ready mapping (``correction`` ``None`` below the minimum)."""
    from .calibration import Correction

    data: dict[str, object] = {"source": source, "model": model, "samples": samples}
    if isinstance(fit, Correction):
        data.update(correction=fit.factor, p10=fit.p10, p90=fit.p90, version=fit.version, clamped=fit.clamped)
    else:
        data.update(correction=None, p10=None, p90=None, version=None, clamped=False)
    return data
