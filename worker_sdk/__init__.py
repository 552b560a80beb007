"""worker_sdk: write keyed osrdyne workers.

    worker = Worker()

    @worker.handler()
    async def echo(request: Request) -> bytes:
        return request.body

    worker.run()

Only `osrdyne.wire` (the protocol) and `osrdyne.ops.logs` (the log set-up the controller uses
too, so both log alike) are imported from osrdyne: the SDK never depends on the controller.
"""

from worker_sdk.errors import HandlerError, Requeue
from worker_sdk.request import Reply, Request
from worker_sdk.settings import WorkerSettings
from worker_sdk.worker import Worker

__all__ = ["HandlerError", "Reply", "Request", "Requeue", "Worker", "WorkerSettings"]
