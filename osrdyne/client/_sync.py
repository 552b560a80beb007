"""A blocking client for scripts: the async `Client` run on a private event-loop thread.

with SyncClient(url) as client:
    print(client.call("core", "42", b"...", timeout=10).text)
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

from osrdyne.client._call import Body
from osrdyne.client._client import Client
from osrdyne.client._response import Response


class SyncClient:
    def __init__(self, url: str = "amqp://guest:guest@127.0.0.1:5672/%2F", **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, daemon=True, name="osrdyne-sync-client"
        )
        self._client = Client(url, **options)

    def __enter__(self) -> SyncClient:
        self._thread.start()
        self._run(self._client.connect())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._run(self._client.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def call(self, pool: str, key: str, body: Body = None, **options: Any) -> Response:
        """Same as `Client.call`, blocking; `on_progress` runs on the client's thread."""
        response: Response = self._run(self._client.call(pool, key, body, **options))
        return response

    @property
    def late_replies(self) -> int:
        return self._client.late_replies

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()
