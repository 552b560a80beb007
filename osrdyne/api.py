"""The controller's HTTP API: liveness, readiness, status and Prometheus metrics.

`/health` always answers while the process runs; `/ready` answers 200 once the controller is
connected (leader or standby); `/status` is the JSON snapshot of the pool, with queue depths
and oldest message ages from the management API; `/metrics` is Prometheus' text format;
`/pulse/scaling` is a scaling signal for autoscalers (200: every group keeps up, 503: some
group has more ready requests per consumer than `api.scaling_backlog_per_consumer`, with the
offending groups in the body). When a token is configured, every endpoint but `/health`
requires `Authorization: Bearer <token>`. docs/observability.md describes every field.
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import re
import time
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from osrdyne.controller import Controller

logger = logging.getLogger(__name__)

_QUEUE_COLUMNS = (
    "name,messages,messages_ready,messages_unacknowledged,consumers,head_message_timestamp"
)

CONTROLLER = web.AppKey("controller", Controller)


def make_app(controller: Controller, *, token: str | None = None) -> web.Application:
    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if token is not None and request.path != "/health":
            given = request.headers.get("Authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                raise web.HTTPUnauthorized(text="bearer token required\n")
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application(middlewares=[auth])
    app[CONTROLLER] = controller
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/status", status)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/pulse/scaling", pulse_scaling)
    return app


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "alive"})


async def ready(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    code = 200 if controller.role in ("leader", "standby") else 503
    return web.json_response({"role": controller.role}, status=code)


async def status(request: web.Request) -> web.Response:
    controller = request.app[CONTROLLER]
    doc = controller.status()
    try:
        queues = await _request_queues(controller)
    except Exception as exc:  # status must answer even when the management API does not
        doc["queues_error"] = f"{type(exc).__name__}: {exc}"
        queues = {}
    now = time.time()
    for key, queue in queues.items():
        group = doc["groups"].setdefault(key, {"state": "unknown"})
        group["messages"] = queue.get("messages", 0)
        group["messages_ready"] = queue.get("messages_ready", 0)
        group["messages_unacknowledged"] = queue.get("messages_unacknowledged", 0)
        group["consumers"] = queue.get("consumers", 0)
        # Only classic queues report their head message's timestamp (seconds); quorum
        # queues (RabbitMQ 3.10) do not, so the age is unknown: null.
        head = queue.get("head_message_timestamp")
        group["oldest_message_age"] = (
            max(0.0, now - head) if isinstance(head, int | float) else None
        )
    return web.json_response(doc, dumps=_dumps)


async def _request_queues(controller: Controller) -> dict[str, dict[str, Any]]:
    """The pool's request queues as the management API reports them, by key."""
    queues = await controller.api.queues(
        name_regex="^" + re.escape(controller.names.request_queue_prefix),
        columns=_QUEUE_COLUMNS,
    )
    by_key: dict[str, dict[str, Any]] = {}
    for queue in queues:
        key = controller.names.key_of_queue(queue["name"])
        if key is not None:
            by_key[key] = queue
    return by_key


async def pulse_scaling(request: web.Request) -> web.Response:
    """200 when every group keeps up with its requests, 503 (with the groups) when not."""
    controller = request.app[CONTROLLER]
    threshold = controller.settings.api.scaling_backlog_per_consumer
    try:
        queues = await _request_queues(controller)
    except Exception as exc:  # unknown is not "scale up": say the source failed
        return web.json_response(
            {"status": "unknown", "error": f"{type(exc).__name__}: {exc}"}, status=502
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


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)


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
        logger.info("HTTP API on http://%s:%d", self.host, self.port)

    async def stop(self) -> None:
        await self._runner.cleanup()
