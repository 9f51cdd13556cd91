"""Transcript formats: detect, parse into :class:`~compaction.blocks.Message` lists."""
