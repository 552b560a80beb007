"""systemd's D-Bus API as the driver uses it: one connection, method calls, unit signals.

The connection is made on first use and again after it is lost, subscribed to the units'
property changes (systemd sends them only to clients that subscribed), which it hands to the
driver's callback. `map_errors` translates D-Bus and connection failures at the edge.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from drivers import base
from drivers.systemd import _settings

if TYPE_CHECKING:
    from dbus_fast.aio import MessageBus

SYSTEMD = "org.freedesktop.systemd1"
MANAGER_PATH = "/org/freedesktop/systemd1"
MANAGER = "org.freedesktop.systemd1.Manager"
UNIT = "org.freedesktop.systemd1.Unit"
SERVICE = "org.freedesktop.systemd1.Service"
PROPERTIES = "org.freedesktop.DBus.Properties"
NO_SUCH_UNIT = "org.freedesktop.systemd1.NoSuchUnit"
LOAD_FAILED = "org.freedesktop.systemd1.LoadFailed"
UNAVAILABLE_ERRORS = frozenset(
    {
        "org.freedesktop.DBus.Error.NoReply",
        "org.freedesktop.DBus.Error.Timeout",
        "org.freedesktop.DBus.Error.TimedOut",
        "org.freedesktop.DBus.Error.Disconnected",
        "org.freedesktop.DBus.Error.NoServer",
        "org.freedesktop.DBus.Error.ServiceUnknown",
        "org.freedesktop.DBus.Error.NameHasNoOwner",
        "org.freedesktop.DBus.Error.LimitsExceeded",
    }
)
#: Active states of a unit that count as a running (or starting, or failed) group.
#: A D-Bus reply's body.
Body = list[Any]


class Bus:
    """The connection to systemd, (re)made when missing or lost."""

    def __init__(
        self, settings: _settings.SystemdSettings, on_message: Callable[[Any], None]
    ) -> None:
        self._settings = settings
        self._on_message = on_message
        self._bus: MessageBus | None = None
        self._connecting = asyncio.Lock()

    async def manager(
        self, method: str, signature: str, body: Body, *, missing_ok: bool = False
    ) -> Body | None:
        return await self.call(
            MANAGER_PATH, MANAGER, method, signature, body, missing_ok=missing_ok
        )

    async def properties(self, path: str, interface: str = SERVICE) -> dict[str, Any]:
        reply = await self.call(path, PROPERTIES, "GetAll", "s", [interface], missing_ok=True)
        if not reply:
            return {}
        return {name: variant.value for name, variant in reply[0].items()}

    async def call(
        self,
        path: str,
        interface: str,
        member: str,
        signature: str,
        body: Body,
        *,
        missing_ok: bool = False,
    ) -> Body | None:
        """One method call to systemd; None when the unit is missing and `missing_ok`."""
        from dbus_fast import Message, MessageType
        from dbus_fast.errors import DBusError

        bus = await self.connect()
        message = Message(
            destination=SYSTEMD,
            path=path,
            interface=interface,
            member=member,
            signature=signature,
            body=body,
        )
        async with asyncio.timeout(self._settings.call_timeout):
            reply = await bus.call(message)
        if reply.message_type == MessageType.ERROR:
            text = reply.body[0] if reply.body and isinstance(reply.body[0], str) else ""
            error = DBusError(reply.error_name or "org.freedesktop.DBus.Error.Failed", text)
            if missing_ok and error.type in (NO_SUCH_UNIT, LOAD_FAILED):
                return None
            if missing_ok and member == "ResetFailedUnit":
                return None  # nothing to reset
            raise error
        body_out: Body = reply.body
        return body_out

    async def connect(self) -> MessageBus:
        """The bus connection, (re)made when missing or lost, subscribed to unit changes."""
        if self._bus is not None and self._bus.connected:
            return self._bus
        async with self._connecting:
            if self._bus is not None and self._bus.connected:
                return self._bus
            from dbus_fast import BusType, Message, MessageType
            from dbus_fast.aio import MessageBus
            from dbus_fast.errors import DBusError

            bus = MessageBus(bus_address=self._settings.bus_address, bus_type=BusType.SYSTEM)
            rule = (
                f"type='signal',sender='{SYSTEMD}',interface='{PROPERTIES}',"
                "member='PropertiesChanged',path_namespace='/org/freedesktop/systemd1/unit'"
            )
            async with asyncio.timeout(self._settings.call_timeout):
                await bus.connect()
                bus.add_message_handler(self._on_message)
                for reply in (
                    await bus.call(
                        Message(
                            destination="org.freedesktop.DBus",
                            path="/org/freedesktop/DBus",
                            interface="org.freedesktop.DBus",
                            member="AddMatch",
                            signature="s",
                            body=[rule],
                        )
                    ),
                    # systemd only sends unit signals to clients that subscribed.
                    await bus.call(
                        Message(
                            destination=SYSTEMD,
                            path=MANAGER_PATH,
                            interface=MANAGER,
                            member="Subscribe",
                        )
                    ),
                ):
                    if reply.message_type == MessageType.ERROR:
                        bus.disconnect()
                        raise DBusError(
                            reply.error_name or "org.freedesktop.DBus.Error.Failed",
                            str(reply.body[0] if reply.body else ""),
                        )
            self._bus = bus
            return bus

    async def close(self) -> None:
        bus, self._bus = self._bus, None
        if bus is not None:
            bus.disconnect()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(
                    bus.wait_for_disconnect(),  # type: ignore[no-untyped-call]
                    self._settings.call_timeout,
                )


@contextlib.contextmanager
def map_errors(action: str) -> Iterator[None]:
    """Turn D-Bus and connection failures into `DriverError`s."""
    from dbus_fast.errors import AuthError, DBusError

    try:
        yield
    except base.DriverError:
        raise
    except DBusError as exc:
        message = f"{action}: systemd refused: {exc.type}: {exc.text}"
        if exc.type in UNAVAILABLE_ERRORS:
            raise base.DriverUnavailable(message) from exc
        raise base.DriverRejected(message) from exc
    except (OSError, EOFError, AuthError, TimeoutError) as exc:
        raise base.DriverUnavailable(f"{action}: systemd's bus is unreachable: {exc!r}") from exc
