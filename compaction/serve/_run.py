"""Run the proxy under uvicorn: what ``compaction serve`` calls."""

from __future__ import annotations

import ipaddress
import logging
import sys
from pathlib import Path

from ..errors import InvalidArgument
from ..recipe import Recipe
from .app import ServeSettings, create_app
from .forwarding import Limits, check_upstream_url, shown_url
from .stores import DEFAULT_OPEN_CONVERSATIONS

__all__ = ["run_server", "is_loopback"]


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost``, ``127.x``, ``::1``).

    Example:
        >>> is_loopback("127.0.0.1"), is_loopback("0.0.0.0")
        (True, False)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run_server(
    *,
    upstream: str,
    store_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8765,
    recipe: Recipe | None = None,
    budget: int | None = None,
    timeout_seconds: float = 600.0,
    max_request_bytes: int = Limits.max_request_bytes,
    open_conversations: int = DEFAULT_OPEN_CONVERSATIONS,
) -> None:
    """Serve the proxy until interrupted (blocks).

    Args:
        upstream: the upstream base URL, ending in ``/v1``.
        store_dir: where conversation stores and the request ledger go (created if missing).
        host: the address to bind; loopback by default (another address is served with a
            warning: every client's credentials pass through the proxy).
        port: the TCP port.
        recipe: compaction settings (default: the built-in recipe).
        budget: a fixed input budget in tokens; ``None``: the model's window minus ``max_tokens``.
        timeout_seconds: the bound on a whole non-streamed answer and on a stream's headers.
        max_request_bytes: the largest request body a client may send (bytes; 413 past it).
        open_conversations: conversations whose stores stay open between requests.

    Raises:
        InvalidArgument: a bad upstream URL, port, budget, request cap or open conversations.
        OSError: the store directory cannot be created or the port cannot be bound.
    """
    import uvicorn

    check_upstream_url(upstream)
    if not 0 < port < 65536:
        raise InvalidArgument(f"--port must be 1 to 65535; found {port}")
    if budget is not None and budget < 1:
        raise InvalidArgument(f"--budget must be a positive number of tokens; found {budget}")
    if isinstance(max_request_bytes, bool) or not isinstance(max_request_bytes, int) or max_request_bytes < 1:
        raise InvalidArgument(f"--max-request-mb must be a positive size; found {max_request_bytes!r} bytes")
    if isinstance(open_conversations, bool) or not isinstance(open_conversations, int) or open_conversations < 1:
        raise InvalidArgument(f"--open-conversations must be a positive integer; found {open_conversations!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s compaction.serve %(message)s"))
    log = logging.getLogger("compaction.serve")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    if not is_loopback(host):
        log.warning("binding %s, not loopback: every client's credentials pass through this proxy", host)
    limits = Limits(timeout_seconds=timeout_seconds, max_request_bytes=max_request_bytes)
    settings = ServeSettings(upstream, Path(store_dir), recipe or Recipe(), budget, limits, open_conversations)
    app = create_app(settings)
    log.info("forwarding to %s, stores in %s, listening on http://%s:%d/v1", shown_url(settings.upstream), store_dir, host, port)
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="warning")
