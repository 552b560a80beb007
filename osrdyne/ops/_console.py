"""The operator console: a web page served by the controller's own HTTP API, and the JSON it
reads besides `/status`.

The page is a handful of static files shipped in the package (`osrdyne/ops/console/`: no
build step, nothing fetched from elsewhere). They hold no data, so they are served without
the token; everything they show comes from endpoints that want it: the page asks for the
token once and sends it as `Authorization: Bearer` on each request (docs/console.md).

    GET /console/            the page (and its allowed assets, by exact name)
    GET /whoami              whether a token is required, and who this client is to the API
    GET /overview            counters, the cold-start histogram, requests routed over time
    GET /timeline?key=K      a key's recent events and dead letters
    GET /poison?key=K        poison entries (the oldest `limit`), of one key or all

Every response of the API carries a strict Content-Security-Policy (scripts and styles from
the API itself only, nothing inline, no framing) and `X-Content-Type-Options: nosniff`; the
page builds every node with `textContent`, so a key or a header full of HTML stays text.
"""

from __future__ import annotations

import datetime
import decimal
import importlib.resources
import time
from typing import Any

from aiohttp import web

from osrdyne.controller import Controller, poison
from osrdyne.ops import _actions, _overview

#: The files of the page, by name, and their content types; nothing else is served.
ASSETS = {
    "index.html": "text/html",
    "console.css": "text/css",
    "app.js": "text/javascript",
    "api.js": "text/javascript",
    "charts.js": "text/javascript",
    "dom.js": "text/javascript",
    "views.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
#: Most poison entries read for one answer (browsing takes them one by one).
MAX_POISON = 500
#: Longest text accepted as a key in a query (the gate refuses anything over 255 bytes).
_MAX_KEY_CHARS = 1024


def is_public(path: str) -> bool:
    """Paths served without the token: the page and its assets (no data in them)."""
    if path in ("/", "/console", "/console/"):
        return True
    return path.startswith("/console/") and path.removeprefix("/console/") in ASSETS


@web.middleware
async def security_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(SECURITY_HEADERS)
        raise
    response.headers.update(SECURITY_HEADERS)
    return response


class Console:
    """The console's page and data endpoints for one controller."""

    def __init__(
        self, controller: Controller, *, token: str | None, actions: _actions.Actions
    ) -> None:
        self._controller = controller
        self._token = token
        self._actions = actions
        self.routed = _overview.RoutedHistory(
            lambda: _overview.counters(controller.metrics.registry)
        )

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/", self.home),
            web.get("/console", self.home),
            web.get("/console/", self.page),
            web.get("/console/{name}", self.asset),
            web.get("/whoami", self.whoami),
            web.get("/overview", self.overview),
            web.get("/timeline", self.timeline),
            web.get("/poison", self.poison),
        ]

    async def home(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/console/")

    async def page(self, request: web.Request) -> web.Response:
        return _asset("index.html")

    async def asset(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in ASSETS:
            raise web.HTTPNotFound(text="no such file\n")
        return _asset(name)

    async def whoami(self, request: web.Request) -> web.Response:
        c = self._controller
        return web.json_response(
            {
                "token_required": self._token is not None,
                **_actions.who(request, self._token),
                "pool": c.settings.pool,
                "role": c.role.value,
                "instance": c.instance,
                "stop_drain": min(c.settings.groups.stop_drain, c.settings.groups.stop_delay),
            }
        )

    async def overview(self, request: web.Request) -> web.Response:
        registry = self._controller.metrics.registry
        return web.json_response(
            {
                "time": time.time(),
                "counters": _overview.counters(registry),
                "cold_start": _overview.histogram(registry, "osrdyne_cold_start_seconds"),
                "routed": {
                    "interval": self.routed.interval,
                    "samples": [[s.time, s.fast, s.orphan] for s in self.routed.samples],
                },
            }
        )

    async def timeline(self, request: web.Request) -> web.Response:
        key = _key(request)
        history = self._controller.history
        return web.json_response(
            {
                "key": key,
                "since": history.since(key),
                "cold_start": history.cold_start(key),
                "events": [
                    {"time": e.time, "kind": e.kind.value, "detail": e.detail}
                    for e in history.events(key)
                ],
                "dead_letters": [
                    {
                        "time": d.time,
                        "reason": d.reason,
                        "correlation_id": d.correlation_id,
                        "deaths": d.deaths,
                        "answered": d.answered,
                    }
                    for d in history.dead_letters(key)
                ],
            }
        )

    async def poison(self, request: web.Request) -> web.Response:
        """The oldest `limit` poison entries (100, at most `MAX_POISON`), of `key` if given;
        `more` says whether the queue holds more than were read."""
        key = _key(request) if "key" in request.query else None
        try:
            limit = int(request.query.get("limit", "100"))
        except ValueError:
            raise web.HTTPBadRequest(text="limit: a whole number\n") from None
        limit = max(1, min(limit, MAX_POISON))
        settings = self._controller.settings
        async with self._actions.poison_lock:
            entries = await poison.list_entries(settings.amqp.url, settings.pool, limit=limit + 1)
        more = len(entries) > limit
        return web.json_response(
            {
                "read": min(len(entries), limit),
                "more": more,
                "entries": [_entry(e) for e in entries[:limit] if key is None or e.key == key],
            }
        )


def _key(request: web.Request) -> str:
    key = request.query.get("key")
    if key is None:
        raise web.HTTPBadRequest(text="key: required\n")
    if len(key) > _MAX_KEY_CHARS:
        raise web.HTTPBadRequest(text=f"key: at most {_MAX_KEY_CHARS} characters\n")
    return key


def _asset(name: str) -> web.Response:
    body = (importlib.resources.files("osrdyne.ops") / "console" / name).read_bytes()
    response = web.Response(body=body, content_type=ASSETS[name])
    if ASSETS[name].startswith("text/"):
        response.charset = "utf-8"
    return response


def _entry(entry: poison.PoisonEntry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "key": entry.key,
        "reason": entry.reason,
        "correlation_id": entry.correlation_id,
        "reply_to": entry.reply_to,
        "deaths": entry.deaths,
        "size": entry.size,
        "headers": _plain(entry.headers),
    }


def _plain(value: Any, depth: int = 0) -> Any:
    """A header value as JSON: bytes as text (invalid bytes replaced), times as ISO text,
    tables and arrays walked to a bounded depth; anything else as its `str`."""
    if depth > 6:
        return "…"
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode(errors="replace")
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, depth + 1) for v in value]
    return str(value)
