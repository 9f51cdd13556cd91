"""``compaction serve``: a drop-in OpenAI Chat / Anthropic Messages proxy that compacts conversations.

Point an agent's base URL at it; each conversation is kept whole in its own store and every
request is compiled within the model's window before it goes upstream.  Needs the ``serve``
extra (``pip install 'compaction[serve]'``: Starlette and uvicorn).  ``import compaction``
never imports this package, and importing it does not import Starlette until a name that
needs it (:func:`create_app`, :class:`ServeSettings`) is used.
"""

from __future__ import annotations

from .._lazy import lazy_getattr
from ._errors import BadRequest, ConversationConflict, ServeError, UpstreamError, UpstreamTimeout
from .forwarding import Limits

__all__ = [
    "CONVERSATION_HEADER",
    "ServeSettings",
    "Limits",
    "create_app",
    "run_server",
    "ServeError",
    "BadRequest",
    "ConversationConflict",
    "UpstreamError",
    "UpstreamTimeout",
]

_LAZY = {
    "CONVERSATION_HEADER": ".app",
    "ServeSettings": ".app",
    "create_app": ".app",
    "run_server": "._run",
}


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
