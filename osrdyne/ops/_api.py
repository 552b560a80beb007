"""The controller's HTTP API: liveness, readiness, status, Prometheus metrics, the operator
console and operators' actions.

`/health` always answers while the process runs; `/ready` answers 200 once the controller is
connected (leader or standby); `/status` is the JSON snapshot of the pool, with queue depths
and oldest message ages from the management API; `/metrics` is Prometheus' text format;
`/pulse/scaling` is a scaling signal for autoscalers (200: every group keeps up, 503: some
group has more ready requests per consumer than `api.scaling_backlog_per_consumer`, with the
offending groups in the body). The console (`/console/`, `_console`) reads `/status` and a few
endpoints of its own; actions (`/actions/...`, `_actions`) warm a key, stop a group, replay or
drop a poison entry. When a token is configured, every endpoint but `/health` and the
console's page and assets requires `Authorization: Bearer <token>`. docs/observability.md
describes every field, docs/console.md the console and its actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
import socket
from collections.abc import AsyncIterator
from typing import Any

import pydantic
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from osrdyne.controller import Controller, GroupQuery, Role
from osrdyne.ops import _actions, _console, logs

logger = logging.getLogger(__name__)

CONTROLLER = web.AppKey("controller", Controller)
#: Longest wait for the management API when answering a scaling pulse.
_SOURCE_TIMEOUT = 5.0
#: Largest request body (actions take a few hundred bytes).
_MAX_BODY = 64 * 1024


def make_app(controller: Controller, *, token: str | None = None) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        public = request.path == "/health" or _console.is_public(request.path)
        if token is not None and not public and not _authorized(request, token):
            raise web.HTTPUnauthorized(text="bearer token required\n")
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application(middlewares=[_console.security_headers, auth], client_max_size=_MAX_BODY)
    app[CONTROLLER] = controller
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/pulse/scaling", pulse_scaling)
    actions = _actions.Actions(controller, token=token)
    console = _console.Console(controller, token=token, actions=actions)
    app.router.add_routes(actions.routes())
    app.router.add_routes(console.routes())

    async def sample_routed(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(console.routed.run(), name="console: routed requests")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    app.cleanup_ctx.append(sample_routed)
    return app


def _authorized(request: web.Request, token: str) -> bool:
    """The request carries `Authorization: Bearer <token>`, compared in constant time. The
    header arrives as whatever bytes the client sent (aiohttp keeps bytes that are not UTF-8
    as surrogate escapes): compared as bytes, never decoded, so any header is a yes or a no."""
    given = request.headers.get("Authorization", "").encode("utf-8", "surrogateescape")
    return hmac.compare_digest(given, f"Bearer {token}".encode())


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def ready(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    code = 200 if controller.role in (Role.LEADER, Role.STANDBY) else 503
    return web.json_response({"role": controller.role.value}, status=code)


async def status(request: web.Request) -> web.Response:
    """The status document, from the controller's memory. Query: `limit`, `offset`, `key`
    (keys containing it), `state`, `sort` (key, messages, activity, state), `descending`;
    `limit=0` gives the pool's summary alone."""
    try:
        query = GroupQuery.model_validate(dict(request.query))
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return web.json_response({"error": f"bad status query: {problems[:500]}"}, status=400)
    doc = await request.app[CONTROLLER].report(query)
    return web.Response(text=doc.model_dump_json(), content_type="application/json")


async def pulse_scaling(request: web.Request) -> web.Response:
    """200 when every group keeps up with its requests, 503 (with the groups) when not."""
    controller = request.app[CONTROLLER]
    threshold = controller.settings.api.scaling_backlog_per_consumer
    try:
        async with asyncio.timeout(_SOURCE_TIMEOUT):  # a pulse answers now or says unknown
            queues = await controller.request_queues(columns="name,messages_ready,consumers")
    except Exception as exc:  # unknown is not "scale up": say the source failed
        return web.json_response(
            {"status": "unknown", "error": logs.redact(f"{type(exc).__name__}: {exc}")},
            status=502,
        )
    behind: dict[str, Any] = {}
    for key, queue in sorted(queues.items()):
        ready = int(queue.get("messages_ready") or 0)
        consumers = int(queue.get("consumers") or 0)
        per_consumer = ready / consumers if consumers else (math.inf if ready else 0.0)
        if per_consumer > threshold:
            behind[key] = {
                "messages_ready": ready,
                "consumers": consumers,
                "backlog_per_consumer": None if math.isinf(per_consumer) else per_consumer,
            }
    doc = {
        "status": "behind" if behind else "ok",
        "threshold": threshold,
        "behind": len(behind),  # a number for autoscalers (KEDA metrics-api valueLocation)
        "groups": behind,
    }
    return web.json_response(doc, status=503 if behind else 200)


async def metrics(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    body = generate_latest(controller.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


class ApiServer:
    """Runs the app on host:port; `port` is the bound one once started (0 picks a free one)."""

    def __init__(self, app: web.Application, *, host: str, port: int) -> None:
        self._runner = web.AppRunner(app, access_log=None)
        self.host, self.port = host, port

    async def start(self) -> None:
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = sockets[0].getsockname()[1]
        logger.info("HTTP API on http://%s:%d (console: /console/)", self.host, self.port)

    @property
    def url(self) -> str:
        """The base URL of the API as others can reach it: this machine's name when it is
        bound to every address."""
        host = socket.gethostname() if self.host in ("", "0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    async def stop(self) -> None:
        await self._runner.cleanup()
