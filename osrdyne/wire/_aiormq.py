"""What osrdyne changes in aiormq, the AMQP client under aio-pika, and why.

Applied once, when `osrdyne.wire` is imported.

When the broker closes a channel (a passive declare of a missing queue, a publish to a missing
exchange, a precondition), the client must answer `channel.close-ok`; until it does, RabbitMQ
keeps the channel, counts it against the connection's `channel_max`, and refuses a new
`channel.open` on its number with the connection error "second 'channel.open' seen". aiormq
(7.2.4 and before) loses that answer under load, in two ways:

* it queues the `close-ok` with `put_nowait` on the connection's write queue (10 frames) and
  drops it silently when the queue is full: the broker keeps the channel forever;
* it frees the channel number when the broker's `channel.close` arrives, before the
  `close-ok` is queued, so a channel opened meanwhile can take the number and send its
  `channel.open` first.

Sixteen tasks opening channels and failing passive declares on one connection left 104
channels open on the broker after 1600 tries (aiormq had none), and numbers climbed until the
broker closed the whole connection at `channel_max`; with 32 queue operations at once the
controller drew "second 'channel.open' seen" (docs/operations.md). The fix keeps aiormq's
design and only orders it: the `close-ok` is queued with `await` (waits for room, never
dropped), and the number is freed after it is queued, so any later `channel.open` on that
number is written after it. `tests/client/test_channel_close.py` shows both.

It also writes the frames queued at once in one socket write. aiormq's writer takes one frame
from the connection's write queue at a time and writes it with its own `send` system call: in
a burst of new keys the controller's largest single cost (15 % of its samples under py-spy)
was those sends. The frame iterator the writer reads from now hands it every frame already
waiting (up to `_COALESCE_FRAMES` frames or `_COALESCE_BYTES`), joined into one: the bytes
and their order are the same, a frame that closes the connection ends the batch, and each
frame's drain future (the publisher's "written") is resolved when the batch is written and
drained, as the single frame's was (`tests/client/test_frame_batches.py`).
"""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

import aiormq.abc
import aiormq.channel
import aiormq.connection
from pamqp import commands as spec

_PATCHED = "_osrdyne_close_ok_ordered"
#: At most this many queued frames, or about this many bytes, go in one socket write.
_COALESCE_FRAMES = 64
_COALESCE_BYTES = 1 << 20


async def _on_close_frame(self: aiormq.channel.Channel, frame: spec.Channel.Close) -> NoReturn:
    """The broker closed the channel: answer `close-ok` (never dropped), then free the number."""
    exc: BaseException = aiormq.channel.exception_by_code(frame)
    self._close_exception = exc
    await self.write_queue.put(
        aiormq.abc.ChannelFrame.marshall(
            channel_number=self.number, frames=[spec.Channel.CloseOk()]
        )
    )
    if self.connection.channels.get(self.number) is self:
        self.connection.channels.pop(self.number, None)
    close_event: Any = self._Channel__close_event  # type: ignore[attr-defined]
    close_event.set()
    raise exc


async def _next_frames(self: aiormq.connection.FrameGenerator) -> aiormq.abc.ChannelFrame:
    """The next frame for the connection's writer, with every frame queued behind it joined."""
    if self.close_event.is_set():
        raise StopAsyncIteration
    frame: aiormq.abc.ChannelFrame = await self.queue.get()
    self.queue.task_done()
    batch = [frame]
    size = len(frame.payload)
    while (
        not frame.should_close
        and len(batch) < _COALESCE_FRAMES
        and size < _COALESCE_BYTES
        and not self.queue.empty()
    ):
        frame = self.queue.get_nowait()
        self.queue.task_done()
        batch.append(frame)
        size += len(frame.payload)
    return _joined(batch) if len(batch) > 1 else frame


def _joined(batch: list[aiormq.abc.ChannelFrame]) -> aiormq.abc.ChannelFrame:
    """One frame of `batch`'s bytes in order; drained when all of them would have been."""
    waiting = [f.drain_future for f in batch if f.should_drain]
    drained: asyncio.Future[None] | None = None
    if waiting:
        drained = asyncio.get_running_loop().create_future()

        def resolve(_: asyncio.Future[None]) -> None:
            for future in waiting:
                if future is not None and not future.done():
                    future.set_result(None)

        drained.add_done_callback(resolve)
    return aiormq.abc.ChannelFrame(
        payload=b"".join(f.payload for f in batch),
        should_close=batch[-1].should_close,
        drain_future=drained,
    )


def apply() -> None:
    channel_class: Any = aiormq.channel.Channel
    if getattr(channel_class, _PATCHED, False):
        return
    # What the change relies on (aiormq 7.2): fail loudly at import, not in production, if a
    # release of aiormq moves it.
    for module, name in (
        (aiormq.connection, "CHANNEL_CLOSE_RESPONSES"),
        (aiormq.channel, "exception_by_code"),
        (aiormq.abc, "ChannelFrame"),
        (aiormq.connection, "FrameGenerator"),
    ):
        if not hasattr(module, name):
            raise ImportError(f"osrdyne needs {module.__name__}.{name} (aiormq 7.2.x)")
    # The connection's reader frees a number only on `close-ok` now (the broker's answer to
    # our own close); a `channel.close` from the broker frees it in `_on_close_frame`.
    aiormq.connection.CHANNEL_CLOSE_RESPONSES = (spec.Channel.CloseOk,)  # type: ignore[assignment]
    channel_class._on_close_frame = _on_close_frame
    generator: Any = aiormq.connection.FrameGenerator
    generator.__anext__ = _next_frames
    setattr(channel_class, _PATCHED, True)
