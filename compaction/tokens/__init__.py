"""Token estimation core: offline encodings, counters, image pricing, request overheads."""

from .encodings import ENCODINGS, get_encoding

__all__ = ["ENCODINGS", "get_encoding"]
