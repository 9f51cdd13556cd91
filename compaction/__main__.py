"""``python -m compaction`` runs the command line."""

import sys

try:
    from .cli import main
except ModuleNotFoundError as err:
    if (err.name or "compaction").split(".")[0] == "compaction":
        raise  # a module of ours is missing: a broken install, shown whole
    # a dependency is missing: this Python is not the one compaction was installed into
    sys.stderr.write(
        f"compaction: error: the package {err.name!r} it needs is not installed for {sys.executable}; "
        "run it with the Python it was installed into (source .venv/bin/activate), "
        "or install it here: pip install -e .\n"
    )
    raise SystemExit(1) from None

main()
