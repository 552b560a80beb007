"""Operators' actions on a pool through the HTTP API: warm a key, stop a group, replay or drop
a poison entry. The console's buttons and `osrdyne warm|stop` call them.

Each is a POST with a JSON body, and is refused before anything acts:

- without the bearer token, when one is set (the API's `auth` middleware, 401);
- when it could come from another site (`guard`, 403/415): it must carry
  `Content-Type: application/json` and the `X-Osrdyne-Action` header, which a cross-site form
  cannot send and a cross-site script can only send after a CORS preflight that this API never
  approves; an `Origin` or `Sec-Fetch-Site` header naming another site is refused; and without
  a token, a `Host` that is a name other than `localhost` (a DNS-rebinding page) is refused;
- on a controller that does not lead its pool (409, with who leads when the broker says);
- for a key the gate refuses (`invalid_key` 400, and whatever a cap refuses later).

Every action is logged with who (the client's address and, with a token, a fingerprint of it:
never the token), what (action, key or entry, outcome) and when (the log line's time).
docs/console.md explains the scheme.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import json
import logging
from typing import Any, TypeVar

import pydantic
from aiohttp import web

from osrdyne import wire
from osrdyne.controller import (
    Controller,
    GroupStatus,
    KeyRefused,
    NotLeader,
    Session,
    poison,
)
from osrdyne.ops import logs

logger = logging.getLogger(__name__)

#: The header every action carries (a cross-site form cannot set it).
ACTION_HEADER = "X-Osrdyne-Action"
#: Longest wait, in a warm, for the key's queue to be bound before answering "pending".
WARM_WAIT = 10.0
#: Longest text accepted as a key (the gate refuses anything over 255 bytes anyway).
_MAX_KEY_CHARS = 1024


class _Body(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class KeyBody(_Body):
    key: str = pydantic.Field(max_length=_MAX_KEY_CHARS)


class EntryBody(_Body):
    id: str = pydantic.Field(min_length=1, max_length=200)


def fingerprint(token: str) -> str:
    """A short, one-way name of a token for logs (which token acted, never the token)."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()[:8]


def who(request: web.Request, token: str | None) -> dict[str, str]:
    """The actor of a request, as logged: its address, and its token's fingerprint."""
    actor = {"client": request.remote or "unknown"}
    if token is not None:
        actor["token"] = fingerprint(token)
    return actor


def guard(request: web.Request, *, token: str | None) -> None:
    """Refuse an action that a page of another site could have sent (see the module doc)."""
    if request.content_type != "application/json":
        raise _refusal(web.HTTPUnsupportedMediaType, "actions take a JSON body")
    if request.headers.get(ACTION_HEADER) is None:
        raise _refusal(web.HTTPForbidden, f"actions need the {ACTION_HEADER} header")
    site = request.headers.get("Sec-Fetch-Site")
    if site is not None and site not in ("same-origin", "none"):
        raise _refusal(web.HTTPForbidden, "cross-site actions are refused")
    origin = request.headers.get("Origin")
    if origin is not None and origin != f"{request.scheme}://{request.host}":
        raise _refusal(web.HTTPForbidden, "actions from another origin are refused")
    if token is None and not _safe_host(request):
        raise _refusal(
            web.HTTPForbidden,
            "without api.token, actions are only taken through an address or localhost",
        )


def _safe_host(request: web.Request) -> bool:
    """The Host header names an IP address or localhost, not a name that a page could have
    pointed at this address (DNS rebinding)."""
    try:
        name = request.url.host or ""
    except ValueError:  # a Host header that is not one
        return False
    if name.lower() == "localhost":
        return True
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


Body = TypeVar("Body", bound=_Body)


async def _parse(request: web.Request, model: type[Body]) -> Body:
    try:
        return model.model_validate_json(await request.read())
    except pydantic.ValidationError as exc:
        errors = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise _refusal(web.HTTPUnprocessableEntity, "; ".join(errors) or "invalid body") from exc


def _refusal(kind: type[web.HTTPException], error: str, **more: Any) -> web.HTTPException:
    body = json.dumps({"ok": False, "error": error, **more})
    return kind(text=body, content_type="application/json")


class Actions:
    """The action endpoints of one controller's API."""

    def __init__(self, controller: Controller, *, token: str | None) -> None:
        self._controller = controller
        self._token = token
        #: Browsing the poison queue takes its messages unacked: one browse at a time here,
        #: so a replay never misses an entry that a concurrent listing holds.
        self.poison_lock = asyncio.Lock()

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/actions/warm", self.warm),
            web.post("/actions/stop", self.stop),
            web.post("/actions/poison/replay", self.replay),
            web.post("/actions/poison/drop", self.drop),
        ]

    async def warm(self, request: web.Request) -> web.Response:
        """Start the group of a key before its first request; answers once its queue is
        bound (`queue: bound`), or after `WARM_WAIT` with `queue: pending`."""
        body = await self._begin(request, KeyBody)
        key = body.key
        session = await self._leading(request, "warm", key=key)
        try:
            generation = session.warm(key, by=self._by(request))
        except KeyRefused as exc:
            self._log(request, "warm", "refused", key=key, error=exc.refusal.error)
            refusal = exc.refusal
            overloaded = refusal.status is wire.Status.OVERLOADED
            raise _refusal(
                web.HTTPServiceUnavailable if overloaded else web.HTTPBadRequest,
                refusal.error,
                status=refusal.status.value,
                reason=refusal.reason or refusal.status.value,
            ) from exc
        try:
            async with asyncio.timeout(WARM_WAIT):
                await session.queue_loop.reached.wait_for(
                    lambda r: r.generation >= generation and r.actual.get(key) is GroupStatus.ACTIVE
                )
            queue = "bound"
        except TimeoutError:
            queue = "pending"
        self._log(request, "warm", "done", key=key, generation=generation)
        return web.json_response(
            {"ok": True, "action": "warm", "key": key, "generation": generation, "queue": queue}
        )

    async def stop(self, request: web.Request) -> web.Response:
        """Unbind a group now and stop it after `groups.stop_drain` (404: it has none)."""
        body = await self._begin(request, KeyBody)
        key = body.key
        session = await self._leading(request, "stop", key=key)
        generation = session.stop(key, by=self._by(request))
        if generation is None:
            self._log(request, "stop", "no group", key=key)
            raise _refusal(web.HTTPNotFound, "this key has no group (or it is stopping already)")
        drain = min(session.stop_drain, session.tracker.stop_delay)
        self._log(request, "stop", "done", key=key, generation=generation)
        return web.json_response(
            {
                "ok": True,
                "action": "stop",
                "key": key,
                "generation": generation,
                "stops_in": drain,
            }
        )

    async def replay(self, request: web.Request) -> web.Response:
        return await self._poison(request, "replay")

    async def drop(self, request: web.Request) -> web.Response:
        return await self._poison(request, "drop")

    async def _poison(self, request: web.Request, action: str) -> web.Response:
        body = await self._begin(request, EntryBody)
        await self._leading(request, f"poison {action}", entry=body.id)
        settings = self._controller.settings
        async with self.poison_lock:
            if action == "replay":
                replayed = await poison.replay(settings.amqp.url, settings.pool, body.id)
                entry = replayed.entry if replayed is not None else None
            else:
                entry = await poison.drop(settings.amqp.url, settings.pool, body.id)
        if entry is None:
            self._log(request, f"poison {action}", "no entry", entry=body.id)
            raise _refusal(web.HTTPNotFound, f"no poison entry {body.id!r}")
        self._log(request, f"poison {action}", "done", entry=body.id, key=entry.key)
        return web.json_response(
            {"ok": True, "action": f"poison {action}", "id": entry.id, "key": entry.key}
        )

    # -- shared steps ---------------------------------------------------------------------

    async def _begin(self, request: web.Request, model: type[Body]) -> Body:
        guard(request, token=self._token)
        return await _parse(request, model)

    async def _leading(self, request: web.Request, action: str, **what: Any) -> Session:
        """The session to act through; 409 with who leads when this controller does not."""
        try:
            return self._controller.leading()
        except NotLeader as exc:
            try:
                leader = await self._controller.find_leader()
            except Exception as find_exc:  # the refusal stands, pointer or not
                logger.debug("cannot tell who leads: %s", logs.redact(str(find_exc)))
                leader = None
            self._log(request, action, "refused: not the leader", **what)
            raise _refusal(
                web.HTTPConflict,
                f"{exc}: act through the leader",
                role=exc.role.value,
                leader=None if leader is None else leader.model_dump(),
            ) from exc

    def _by(self, request: web.Request) -> str:
        return " ".join(f"{k}={v}" for k, v in who(request, self._token).items())

    def _log(self, request: web.Request, action: str, outcome: str, **what: Any) -> None:
        actor = who(request, self._token)
        key = what.pop("key", None)
        logger.info(
            "action %s (%s) by %s",
            action,
            outcome,
            self._by(request),
            extra=logs.fields(
                pool=self._controller.settings.pool,
                key=key,
                action=action,
                outcome=outcome,
                **actor,
                **what,
            ),
        )
