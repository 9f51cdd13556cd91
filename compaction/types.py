"""The closed vocabularies that steer control flow, as types mypy checks.

Each is a ``Literal`` of the strings the package has always used (they appear in recipes,
on the command line, in stored provenance and in error attributes), so values stay plain
strings on the wire and in the store while a typo in the code is a type error.  The
tuples beside them are the same values at run time, for validation and ``--help``.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "RequestFormatName",
    "Purpose",
    "SummaryKind",
    "Stage",
    "ImagePolicy",
    "REQUEST_FORMAT_NAMES",
    "PURPOSES",
    "SUMMARY_KINDS",
    "STAGES",
    "IMAGE_POLICIES",
]

#: A request format: OpenAI Chat Completions or Anthropic Messages (see :mod:`compaction.outputs`).
RequestFormatName = Literal["openai", "anthropic", "openai-responses"]

#: What a summarizer request is for: a chunk of raw messages (``l1``), summaries of one level
#: into the next (``merge``), one part of a tool round too large to send whole (``split``), or
#: partial summaries of one range into one (``stitch``).
SummaryKind = Literal["l1", "merge", "split", "stitch"]

#: Why an outbound request is made: the next model turn (``live``), a summarizer request, or
#: the caption of one image (``caption``, :mod:`compaction.captions`).
Purpose = Literal["live", "l1", "merge", "split", "stitch", "caption"]

#: Which part of a request could not shrink to fit the budget (``OverBudget.stage``).
Stage = Literal["live window", "unsummarized tail", "summaries", "request", "settings"]

#: ``live`` ships images (subject to caps); ``placeholders`` (a text-only model) ships none.
ImagePolicy = Literal["live", "placeholders"]

REQUEST_FORMAT_NAMES: tuple[RequestFormatName, ...] = get_args(RequestFormatName)
PURPOSES: tuple[Purpose, ...] = get_args(Purpose)
SUMMARY_KINDS: tuple[SummaryKind, ...] = get_args(SummaryKind)
STAGES: tuple[Stage, ...] = get_args(Stage)
IMAGE_POLICIES: tuple[ImagePolicy, ...] = get_args(ImagePolicy)
