"""The worker side of runtimes whose requests run concurrently: an asyncio event loop driven by
the worker's steps (torchserve-c internal).

The worker is a step loop (backend/worker/worker.c); this handler is continuous, so it holds
up to batchSize requests across steps. Each request is a task on one asyncio loop. A step:
  1. new requests become tasks (the app's start() checks them first: a bad request is answered
     at once with its status); later input messages of a streamed input go to their request's
     queue; a request whose client went away has its task cancelled;
  2. the loop runs until nothing is ready (at most STEP_BUDGET_S, so that a busy loop still lets
     answers out);
  3. each request's outputs so far go out as partial results, in order, and a finished request
     gets its final frame (empty after a stream) or its error; the others are kept
     (ts_continue) until the loop's next timer is due.
Between steps the worker waits on its socket and on the loop's epoll descriptor (ts_set_wake_fd):
a thread that hands the loop something (call_soon_threadsafe, an executor finishing) or a socket
the loop watches wakes every held request at once. The GIL is free between steps
(py_handler.c), so such threads run while the worker waits.

A request that is held but not stepped (its client reads slowly: paused) keeps its outputs here;
after MAX_QUEUED of them its producer waits (put_output) until they went out.
"""
import asyncio
import collections
import json
import logging
import selectors
import time
import traceback

import _ts_stream
import _ts_worker

from .payload import META_CTYPE

logger = logging.getLogger("tsc_runtimes")

STEP_BUDGET_S = 0.05  # longest a step runs the loop before it lets answers out
IDLE_WAKE_S = 1.0  # a held request with nothing scheduled is stepped at least this often
MAX_QUEUED = 16  # outputs a request holds before its producer waits

_END = object()


class RequestError(Exception):
    """A request the app refuses or fails: status and message for the client."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.message = message


def error_of(e):
    """(status, message) for an exception from app code: its own status (RequestError,
    MLServer's status_code) when it has one in 400..599, else 500 with its type and text."""
    if isinstance(e, RequestError):
        return e.status, e.message
    status = getattr(e, "status_code", None)
    if isinstance(status, int) and 400 <= status <= 599:
        return status, str(e)
    return 500, f"{type(e).__name__}: {e}"


class Request:
    """One request on the loop: what the app reads and writes."""

    def __init__(self, host, rid, headers, params):
        self.host = host
        self.id = rid
        self.headers = dict(headers)
        self.params = params  # [(name, content type, value)] of its first message
        self.input = asyncio.Queue()  # later messages (content type, body); _END at the end
        self.outputs = collections.deque()  # (body, content type) not yet sent
        self.space = asyncio.Event()
        self.space.set()
        self.final = None  # (body, content type) of a unary answer
        self.error = None  # (status, message)
        self.done = False
        self.gone = False
        self.task = None
        self.sent = 0

    async def put_output(self, body, ctype):
        """Queues a partial result; waits while MAX_QUEUED are unsent."""
        while len(self.outputs) >= MAX_QUEUED and not self.gone:
            self.space.clear()
            await self.space.wait()
        if not self.gone:
            self.outputs.append((body, ctype))

    async def next_input(self):
        """The next message of a streamed input, or None at its end."""
        item = await self.input.get()
        if item is _END:
            self.input.put_nowait(_END)  # stays ended
            return None
        return item


class Host:
    """Runs an app's requests on one event loop. The app has start(request) -> coroutine (it
    may raise RequestError for a request it refuses at once) and, optionally, destroy()."""

    def __init__(self, app):
        self.app = app
        self.selector = selectors.EpollSelector()
        self.loop = asyncio.SelectorEventLoop(self.selector)
        asyncio.set_event_loop(self.loop)
        self.reqs = {}
        _ts_stream.set_wake_fd(self.selector.fileno())
        _ts_stream.on_gone(self._reap)

    def run(self, coro):
        """Runs a coroutine to its end (loading)."""
        return self.loop.run_until_complete(coro)

    # ---- one step

    def _forget_gone(self):
        for rid in _ts_stream.gone():
            req = self.reqs.pop(rid, None)
            if req is not None:
                self._forget(req)

    def _reap(self):
        """A held request was dropped between steps (its client went away): its task is
        cancelled now, and the loop runs so that the cancellation reaches its code."""
        try:
            self._forget_gone()
            self._run_loop()
        except Exception:  # pylint: disable=broad-except
            logger.error("stopping a cancelled request:\n%s", traceback.format_exc())

    def step(self, n):
        self._forget_gone()
        stepped = []
        for i, (rid, _is_new, headers, params) in enumerate(_ts_worker.batch()):
            req = self.reqs.get(rid)
            if req is None:
                req = self._start(i, rid, headers, params)
                if req is None:
                    continue
            if _ts_worker.is_cancelled(i):
                self.reqs.pop(rid, None)
                _ts_stream.untrack(i)
                self._forget(req)
                continue
            self._take_input(i, req)
            stepped.append((i, req))
        self._run_loop()
        delay_us = self._next_delay_us()
        dropped = False
        for i, req in stepped:
            dropped |= not self._deliver(i, req, delay_us)
        if dropped:  # a client left while its answers went out: its cancellation runs now
            self._run_loop()

    def _start(self, i, rid, headers, params):
        if params and params[0][1] == META_CTYPE:  # the frontend asks for the model's tensors
            md = self.app.metadata() if hasattr(self.app, "metadata") else {}
            _ts_worker.respond(i, json.dumps(md).encode(), 200, "",
                               {"content-type": "application/json"})
            return None
        req = Request(self, rid, headers, params)
        try:
            coro = self.app.start(req)
        except Exception as e:  # pylint: disable=broad-except
            status, msg = error_of(e)
            if status >= 500:
                logger.error("request %s:\n%s", rid, traceback.format_exc())
            _ts_worker.error(i, status, msg)
            return None
        _ts_stream.track(i)
        req.task = self.loop.create_task(self._run(req, coro))
        self.reqs[rid] = req
        return req

    async def _run(self, req, coro):
        try:
            await coro
        except asyncio.CancelledError:
            req.gone = True
        except Exception as e:  # pylint: disable=broad-except
            req.error = error_of(e)
            if req.error[0] >= 500:
                logger.error("request %s:\n%s", req.id, traceback.format_exc())
        finally:
            req.done = True

    def _take_input(self, i, req):
        while True:
            m = _ts_stream.input_next(i)
            if m is None:
                return
            if m is False:
                req.input.put_nowait(_END)
                return
            req.input.put_nowait(m)

    def _forget(self, req):
        """The request's client went away: stop its task."""
        req.gone = True
        req.space.set()
        if req.task is not None and not req.task.done():
            req.task.cancel()

    def _run_loop(self):
        loop = self.loop
        end = time.monotonic() + STEP_BUDGET_S
        while True:
            loop.call_soon(loop.stop)
            loop.run_forever()
            # _ready: the loop's callbacks due now (asyncio's BaseEventLoop, stable since 3.4)
            if not getattr(loop, "_ready", None) or time.monotonic() >= end:
                return

    def _next_delay_us(self):
        loop = self.loop
        if getattr(loop, "_ready", None):
            return 0
        whens = [h.when() for h in getattr(loop, "_scheduled", ()) if not h.cancelled()]
        wait = min(whens) - loop.time() if whens else IDLE_WAKE_S
        return max(0, int(min(wait, IDLE_WAKE_S) * 1e6))

    def _deliver(self, i, req, delay_us):
        """Sends request i's outputs and its end; False when its client was found gone."""
        while req.outputs:
            body, ctype = req.outputs.popleft()
            if not _ts_worker.intermediate(i, body, 200, "", {"content-type": ctype}):
                self.reqs.pop(req.id, None)
                _ts_stream.untrack(i)
                self._forget(req)  # the client went away
                return False
            req.sent += 1
        req.space.set()
        if not req.done:
            _ts_worker.cont(i, delay_us)
            return True
        self.reqs.pop(req.id, None)
        _ts_stream.untrack(i)
        if req.error is not None:
            _ts_worker.error(i, req.error[0], req.error[1])
        elif req.final is not None:
            body, ctype = req.final
            _ts_worker.respond(i, body, 200, "", {"content-type": ctype})
        else:  # the end of a stream: an empty last frame adds no message
            _ts_worker.respond(i, b"", 200, "", {"content-type": "text/plain"})
        return True

    def destroy(self):
        _ts_stream.on_gone(None)
        for req in list(self.reqs.values()):
            self._forget(req)
        destroy = getattr(self.app, "destroy", None)
        if destroy is not None:
            destroy(self)
