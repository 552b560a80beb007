"""A worker with handlers that never return, for the watchdog tests (run by the subprocess
driver as `python -m tests.security.wedged_worker`)."""

from __future__ import annotations

import asyncio
import threading

from worker_sdk import Request, Worker

worker = Worker()


@worker.handler()
async def echo(request: Request) -> bytes:
    return request.body


@worker.handler("block-thread")
def block_thread(request: Request) -> None:
    threading.Event().wait()  # a synchronous handler stuck for good: cannot be interrupted


@worker.handler("block-async")
async def block_async(request: Request) -> None:
    await asyncio.Event().wait()  # stuck, but cancellable


if __name__ == "__main__":
    worker.run()
