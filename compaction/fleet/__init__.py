"""Fleet compaction: compress many conversations at once, one task per conversation.

* :mod:`.targets`: where the conversations live (:func:`fleet_targets`: a directory of
  SQLite stores, a proxy's ``--store-dir``, or a PostgreSQL database).
* :mod:`.task`: one task (:func:`compress_conversation`), run wherever a worker is.
* :mod:`.engines`: :func:`run_fleet` on the ``local`` engine (this process or a process
  pool) or ``dask`` (a ``dask.distributed`` cluster, imported only when it runs).
* :mod:`.counting`: ``compaction count --engine dask``, the batch counter mapped over
  partitions of a corpus.
* :mod:`.cli`: ``compaction fleet compress``.

A fleet run gives the same stored summaries, byte for byte, as compressing each
conversation in turn: every task runs the same deterministic compression on its own store.

Example:
    >>> from compaction import Recipe
    >>> from compaction.fleet import FleetSettings, fleet_targets, run_fleet
    >>> report = run_fleet(fleet_targets("runs/"), FleetSettings(Recipe()), engine="dask")  # doctest: +SKIP
"""

from __future__ import annotations

from .engines import ENGINES, FleetEngineError, FleetReport, run_fleet
from .targets import FleetLocationError, FleetTarget, fleet_targets, select_targets
from .task import ConversationResult, FleetSettings, compress_conversation

__all__ = [
    "ENGINES",
    "ConversationResult",
    "FleetEngineError",
    "FleetLocationError",
    "FleetReport",
    "FleetSettings",
    "FleetTarget",
    "compress_conversation",
    "fleet_targets",
    "run_fleet",
    "select_targets",
]
