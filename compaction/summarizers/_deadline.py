"""One deadline for a whole HTTP request: connect, TLS, sending, the status line, headers and body.

httpx's timeouts bound each socket operation, so a server that sends one byte a second --
of its headers or of its body -- never trips them.  This module bounds the sum: within
:func:`deadline`, every connect, TLS handshake, read and write of a client prepared by
:func:`bound_client` is given the smaller of its own timeout and the time left before the
deadline, and fails with httpx's ``ConnectTimeout``, ``ReadTimeout`` or ``WriteTimeout`` once
none is left.  Writes go out in pieces of 64 KiB, each with the time then left.  Outside
:func:`deadline` the client behaves as before.

How: httpx's :class:`~httpx.HTTPTransport` runs on an httpcore connection pool whose network
backend opens the sockets; :func:`bound_client` wraps that backend (of the client's transport
and of each proxy transport it mounted) in :class:`DeadlineBackend`, whose streams read the
deadline from a context variable at every operation.  httpx offers no public way to pass a
backend, so this reaches into ``client._transport._pool._network_backend``;
:func:`bound_client` returns ``False`` when that is not there (another transport, such as
``httpx.MockTransport``, or a future httpx), and the caller still checks the deadline
between the body's reads.  Connections opened before the client was prepared are not bound.
Name resolution (``getaddrinfo``) is not bounded: the standard library offers no timeout for it.
"""

from __future__ import annotations

import ssl
import time
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore
import httpx

__all__ = ["deadline", "bound_client", "PastDeadline", "DeadlineBackend"]

_DEADLINE: ContextVar[float | None] = ContextVar("compaction_http_deadline", default=None)
_WRITE_PIECE = 64 * 1024


class PastDeadline(Exception):
    """The response did not arrive whole before the deadline."""


@contextmanager
def deadline(at: float) -> Iterator[None]:
    """Bound every socket operation of a prepared client, in this context, by ``at`` (``time.monotonic()``)."""
    token = _DEADLINE.set(at)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """Return the timeout of one operation: ``timeout`` cut to the time left (seconds)."""
    at = _DEADLINE.get()
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every operation ends by the deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        for start in range(0, len(buffer), _WRITE_PIECE):
            self._inner.write(buffer[start : start + _WRITE_PIECE], _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        upgraded = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        return DeadlineStream(upgraded)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    """A network backend whose connections end every operation by the deadline."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return DeadlineStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def bound_client(client: httpx.Client) -> bool:
    """Prepare ``client`` so :func:`deadline` bounds its requests; return whether it could be.

    Idempotent.  Returns ``False`` when the client's transport is not an httpx
    :class:`~httpx.HTTPTransport` over an httpcore pool (a mock transport, a custom one).
    """
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    bound = False
    for transport in transports:
        if not isinstance(transport, httpx.HTTPTransport):
            continue
        pool = getattr(transport, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, DeadlineBackend):
            bound = True
        elif isinstance(backend, httpcore.NetworkBackend):
            pool._network_backend = DeadlineBackend(backend)  # type: ignore[union-attr]
            bound = True
    return bound
