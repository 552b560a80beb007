"""The client library: call keyed workers of a pool and read their answers.

`Client` (asyncio) and `SyncClient` (blocking, for scripts and threads) publish requests to a
pool's request exchange and wait for the answer; `Response` is what comes back.
"""

from osrdyne.client._call import Body
from osrdyne.client._client import Client
from osrdyne.client._response import Response
from osrdyne.client._sync import SyncClient

__all__ = ["Body", "Client", "Response", "SyncClient"]
