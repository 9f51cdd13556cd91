"""``python -m compaction`` runs the command line."""

from .cli import main

main()
