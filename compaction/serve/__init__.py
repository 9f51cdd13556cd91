"""``compaction serve``: a drop-in OpenAI Chat / Anthropic Messages proxy that compacts conversations.

Point an agent's base URL at it; each conversation is kept whole in its own store and every
request is compiled within the model's window before it goes upstream.  Needs the ``serve``
extra (``pip install 'compaction[serve]'``: Starlette and uvicorn); ``import compaction``
never imports this package.
"""

from __future__ import annotations

from ._errors import BadRequest, ConversationConflict, ServeError, UpstreamError, UpstreamTimeout
from .app import CONVERSATION_HEADER, ServeSettings, create_app
from .forwarding import Limits

__all__ = [
    "CONVERSATION_HEADER",
    "ServeSettings",
    "Limits",
    "create_app",
    "ServeError",
    "BadRequest",
    "ConversationConflict",
    "UpstreamError",
    "UpstreamTimeout",
]
