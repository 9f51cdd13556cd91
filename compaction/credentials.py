"""What a credential looks like: the token shapes the recipe refuses as settings and shown text redacts.

OpenAI and Anthropic keys (``sk-...``, ``sk_...``), Google (``AIza...``), GitHub (``ghp_``,
``github_pat_``...), Slack (``xox?-``), Hugging Face (``hf_``) and AWS access key ids
(``AKIA``/``ASIA``).  One alternation, without anchors, for :mod:`compaction.recipe` (a whole
value) and :mod:`compaction.formats._shown` (a token anywhere in a text) to build on, so that
the two never disagree about a key's shape.
"""

from __future__ import annotations

__all__ = ["CREDENTIAL_TOKENS"]

#: A regular expression alternation matching one credential-shaped token (no anchors, no group).
CREDENTIAL_TOKENS = (
    r"sk-[A-Za-z0-9_\-]{12,}|sk_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|hf_[A-Za-z0-9]{20,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
)
