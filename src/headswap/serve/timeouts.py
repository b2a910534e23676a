"""A read deadline for uvicorn's h11 protocol: a request must arrive whole (headers and body) in bounded time.

uvicorn (checked at 0.54) has no header or body read timeout. Its only timer, ``timeout_keep_alive``, is armed
after a response and cancelled by the next byte, so a client that connects and sends nothing, or half a
request line, or its headers one byte a minute (slowloris), keeps its connection open for ever. Here each
request gets ``read_timeout`` seconds from the connection being opened (or from the first byte after a
keep-alive idle) until its last body byte; past that the connection is closed. Once the whole request is in,
the deadline is cancelled: a slow model never cuts a request off. h11 already caps a request head at 16 KiB
(``h11_max_incomplete_event_size``), so a slow client holds a socket and at most that much memory, for at most
``read_timeout`` seconds. It does not limit how many such connections one client opens: in front of the
public internet, put a reverse proxy (nginx, Caddy) that caps connections per address.

Imports uvicorn: load it only where uvicorn is known to be installed.
"""

from __future__ import annotations

import asyncio
import logging

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("uvicorn.error")


class ReadTimeoutH11Protocol(H11Protocol):
    """uvicorn's h11 protocol plus a deadline (``read_timeout`` seconds) for receiving each whole request."""

    read_timeout: float = 20.0

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self._read_deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm_read_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # IDLE: the head is still partial; SEND_BODY: the body is still arriving. Anything else (DONE,
        # MUST_CLOSE, ERROR, CLOSED) means this request is fully read or the connection is over.
        if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
            self._arm_read_deadline()
        else:
            self._disarm_read_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_read_deadline()
        super().connection_lost(exc)

    def _arm_read_deadline(self) -> None:
        if self._read_deadline is None:   # the deadline counts from the request's start, not from each byte
            self._read_deadline = self.loop.call_later(self.read_timeout, self._read_timed_out)

    def _disarm_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
            return
        log.info("%s: request not received whole within %g s; connection closed",
                 "%s:%s" % self.client if self.client else "client", self.read_timeout)
        # Closing wakes an app that is waiting for the body with http.disconnect.
        self.transport.close()


def read_timeout_protocol(seconds: float) -> type[ReadTimeoutH11Protocol]:
    """The protocol class to pass as uvicorn's ``http=``, with its deadline set to ``seconds``."""
    if not seconds > 0:
        raise ValueError(f"read timeout must be > 0 seconds, got {seconds}")
    return type("ReadTimeoutH11Protocol", (ReadTimeoutH11Protocol,), {"read_timeout": float(seconds)})
