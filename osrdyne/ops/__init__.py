"""The operator surface: the `osrdyne` command, the HTTP API, metrics, logs and tracing.

`cli` is the command line (`osrdyne run|call|status|watch|warm|stop|poison|roles`);
`ApiServer` and `make_app` serve a controller's HTTP API, with the operator console
(`_console`, its page in `console/`) and the actions (`_actions`); `metrics`, `logs` and
`tracing` are the instruments the controller and the client report through (they import
nothing else of osrdyne, so both can use them without importing the API or the CLI); `roles`
the RabbitMQ users a pool needs.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from osrdyne.ops import logs, metrics, roles, tracing
    from osrdyne.ops._api import ApiServer, make_app

_LAZY = {"ApiServer", "make_app"}
#: Imported on first use: a worker imports `logs` only, and starts faster without the rest
#: (prometheus_client, the HTTP API, the console).
_SUBMODULES = {"logs", "metrics", "roles", "tracing"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from osrdyne.ops import _api

        return getattr(_api, name)
    if name in _SUBMODULES:
        return importlib.import_module(f"osrdyne.ops.{name}")
    raise AttributeError(f"module 'osrdyne.ops' has no attribute {name!r}")


__all__ = ["ApiServer", "logs", "make_app", "metrics", "roles", "tracing"]
