"""The echo worker: answers each request with its body, plus a few endpoints for tests.

Endpoints (`x-rpc-path`): default echoes the body; `whoami` answers the key and worker id;
`sleep` sleeps the number of seconds in the body; `fail` raises; `progress` sends three
interim messages before answering; `crash` kills the process (a worker dying mid-request).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from worker_sdk import HandlerError, Request, Worker

worker = Worker()


@worker.handler()
async def echo(request: Request) -> bytes:
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
