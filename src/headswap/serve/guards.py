"""The limits and access checks of `headswap serve`, as pure ASGI middleware that runs before FastAPI parses
anything: body size, Content-Length, UTF-8 and JSON depth (BodyGuard); the API key and the per-client cap on
requests in flight (AccessGuard). Rejections are JSON ``{"error": "one line", "detail": ...}`` like the app's.
"""

from __future__ import annotations


def _json_depth_over(body: bytes, limit: int) -> bool:
    """Whether JSON text nests arrays/objects deeper than `limit` (strings skipped); the parser would
    otherwise recurse until Python's recursion limit and fail with a generic error."""
    depth, in_string, escaped = 0, False, False
    for byte in body:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:      # backslash
                escaped = True
            elif byte == 0x22:      # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return True
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return False


class BodyGuard:
    """Pure ASGI middleware: reject bodies over ``max_body_bytes`` (413, from Content-Length or while
    streaming, without reading the rest), an invalid Content-Length, bodies that are not UTF-8 and JSON nested
    deeper than ``max_json_depth`` (400); replay the body otherwise."""

    def __init__(self, app, max_body_bytes: int, max_json_depth: int = 32):
        self.app, self.max_body_bytes, self.max_json_depth = app, max_body_bytes, max_json_depth

    async def _reject(self, scope, receive, send, status: int, error: str, detail=None) -> None:
        from starlette.responses import JSONResponse
        await JSONResponse({"error": error, "detail": detail}, status_code=status,
                           headers={"Connection": "close"})(scope, receive, send)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        limit = self.max_body_bytes
        too_large = f"request body too large: the limit is {limit} bytes"
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                    if declared < 0:
                        raise ValueError
                except ValueError:
                    return await self._reject(scope, receive, send, 400, "invalid Content-Length header",
                                              {"content_length": value.decode("latin-1")[:40]})
                if declared > limit:
                    return await self._reject(scope, receive, send, 413, too_large,
                                              {"limit_bytes": limit, "content_length": declared})
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return await self._reject(scope, receive, send, 413, too_large, {"limit_bytes": limit})
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as e:
            return await self._reject(scope, receive, send, 400, f"request body is not valid UTF-8 (byte {e.start})",
                                      {"position": e.start, "reason": e.reason})
        if _json_depth_over(body, self.max_json_depth):
            return await self._reject(scope, receive, send, 400, f"JSON nested deeper than {self.max_json_depth} "
                                      f"levels", {"max_depth": self.max_json_depth})
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)


class AccessGuard:
    """Pure ASGI middleware: the bearer token (401 without it) and the per-client cap on requests in flight
    (429). /health stays open for liveness probes."""

    OPEN = ("/health",)

    def __init__(self, app, api_key: str | None, max_concurrent_per_client: int):
        self.app, self.api_key, self.cap = app, api_key, max_concurrent_per_client
        self.in_flight: dict[str, int] = {}

    async def _reject(self, scope, receive, send, status: int, error: str, headers=None) -> None:
        from starlette.responses import JSONResponse
        await JSONResponse({"error": error, "detail": None}, status_code=status, headers=headers)(scope, receive, send)

    def _authorized(self, scope) -> bool:
        import hmac
        given = dict(scope.get("headers", [])).get(b"authorization", b"")
        scheme, _, token = given.partition(b" ")
        # The scheme's name is case-insensitive (RFC 7235 2.1: "bearer KEY" is "Bearer KEY"); the key is not.
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.lstrip(b" "), self.api_key.encode("utf-8"))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("path") in self.OPEN:
            return await self.app(scope, receive, send)
        if self.api_key and not self._authorized(scope):
            return await self._reject(scope, receive, send, 401, "missing or wrong API key: send the header "
                                      "'Authorization: Bearer <key>'", {"WWW-Authenticate": "Bearer"})
        if not self.cap:
            return await self.app(scope, receive, send)
        client = (scope.get("client") or ("unknown",))[0]
        if self.in_flight.get(client, 0) >= self.cap:
            return await self._reject(scope, receive, send, 429, f"too many requests in flight from this client "
                                      f"(the limit is {self.cap}); retry when one has finished", {"Retry-After": "1"})
        self.in_flight[client] = self.in_flight.get(client, 0) + 1
        try:
            return await self.app(scope, receive, send)
        finally:
            self.in_flight[client] -= 1
            if not self.in_flight[client]:
                del self.in_flight[client]
