"""The echo worker: answers each request with its body, plus a few endpoints for tests.

Endpoints (`x-rpc-path`): default echoes the body (after `ECHO_DELAY` seconds when that
variable is set: a handler that takes its time, for the scaling tests and bench); `whoami`
answers the key and worker id; `sleep` sleeps the number of seconds in the body; `fail`
raises; `progress` sends three interim messages before answering; `crash` kills the process
(a worker dying mid-request).

With `ECHO_REQUIRE_FILE` set, its start-up needs that file (as a worker needs its dataset):
while it is missing the worker fails to start (it reports why, then exits).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from worker_sdk import HandlerError, Request, Worker

worker = Worker()
#: Seconds the default endpoint takes (ECHO_DELAY; 0: answer at once).
DELAY = float(os.environ.get("ECHO_DELAY") or 0)


@worker.on_startup
async def require_file(worker: Worker) -> None:
    # Async: a sync hook runs in the handler thread pool and starts its first thread at
    # start-up; `crash` (a sync handler) then kills the process before a request handled
    # beside it is acked after its reply, and that request is answered twice.
    required = os.environ.get("ECHO_REQUIRE_FILE")
    if required and not os.path.exists(required):
        raise FileNotFoundError(f"the echo worker needs {required}, which does not exist")


@worker.handler()
async def echo(request: Request) -> bytes:
    if DELAY:
        await asyncio.sleep(DELAY)
    return request.body


@worker.handler("whoami")
async def whoami(request: Request) -> dict[str, Any]:
    return {"key": request.key, "worker_id": worker.settings.id, "pid": os.getpid()}


@worker.handler("sleep")
async def sleep(request: Request) -> str:
    await asyncio.sleep(float(request.body or b"1"))
    return "slept"


@worker.handler("fail")
async def fail(request: Request) -> None:
    raise HandlerError("asked to fail", details={"body": request.body.decode(errors="replace")})


@worker.handler("progress")
async def progress(request: Request) -> str:
    for step in range(3):
        await request.progress({"step": step + 1, "of": 3})
    return "done"


@worker.handler("crash")
def crash(request: Request) -> None:
    os._exit(17)


if __name__ == "__main__":
    worker.run()
