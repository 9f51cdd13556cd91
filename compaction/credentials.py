"""What a credential looks like: the token shapes the recipe refuses as settings and shown text redacts.

OpenAI and Anthropic keys (``sk-...``, ``sk_...``), Google (``AIza...``), GitHub (``ghp_``,
``github_pat_``...), Slack (``xox?-``), Hugging Face (``hf_``) and AWS access key ids
(``AKIA``/``ASIA``).  One alternation, without anchors, for :mod:`compaction.recipe` (a whole
value) and :mod:`compaction.formats._shown` (a token anywhere in a text) to build on, so that
the two never disagree about a key's shape.

A key may also travel in a URL's query string (``?key=`` for Gemini, ``?api-key=`` for Azure,
``?access_token=`` for OAuth bearer tokens, RFC 6750 section 2.3): :data:`QUERY_CREDENTIAL_NAMES`
names those parameters, for :mod:`compaction.serve` to scrub what a client sends that way.
"""

from __future__ import annotations

__all__ = ["CREDENTIAL_TOKENS", "QUERY_CREDENTIAL_NAMES"]

#: A regular expression alternation matching one credential-shaped token (no anchors, no group).
CREDENTIAL_TOKENS = (
    r"sk-[A-Za-z0-9_\-]{12,}|sk_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_\-]{30,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9\-]{10,}|hf_[A-Za-z0-9]{20,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
)

#: Query-string parameters whose value is a credential (compared lower-cased, ``-`` and ``_``
#: alike): Google's ``key``, Azure's ``api-key``, OAuth's ``access_token`` (RFC 6750 2.3) and
#: their common spellings.  A query value of any name shaped like :data:`CREDENTIAL_TOKENS`
#: counts too.
QUERY_CREDENTIAL_NAMES = frozenset(
    {"key", "api_key", "apikey", "access_token", "token", "auth", "auth_token", "x_api_key", "sig"}
)
