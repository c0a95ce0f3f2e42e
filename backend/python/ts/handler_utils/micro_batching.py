"""ts.handler_utils.micro_batching: TorchServe's MicroBatching.

A handler's batch is cut into micro-batches of micro_batch_size requests, which flow through
three stages, the handler's preprocess, inference and postprocess, each run by its own threads
(parallelism: {"preprocess": n, "inference": n, "postprocess": n}, 1 each by default), so that
one micro-batch is preprocessed while another runs its forward. The results come back in the
batch's order. A handler uses it as TorchServe's examples/micro_batching does:

    class MicroBatchingHandler(ImageClassifier):
        def __init__(self):
            self.handle = MicroBatching(self)

and sets micro_batch_size and parallelism from its model-config.yaml in initialize(). An
exception in a stage fails the whole call (every request of the batch) with that exception,
instead of leaving it waiting.
"""

import queue
import threading
import time

HANDLER_METHODS = ["preprocess", "inference", "postprocess"]

_STOP = object()


class _Stage:
    """One processing step: its input queue and the threads that run the handler's method."""

    def __init__(self, owner, method):
        self.owner = owner
        self.method = method
        self.inbox = queue.Queue()
        self.threads = []

    def resize(self, n):
        while len(self.threads) < n:
            t = threading.Thread(target=self._run, name=f"micro-batching-{self.method}",
                                 daemon=True)
            self.threads.append(t)
            t.start()
        while len(self.threads) > n:
            self.inbox.put(_STOP)
            self.threads.pop().join()

    def _run(self):
        fn = getattr(self.owner.handler, self.method)
        while True:
            item = self.inbox.get()
            if item is _STOP:
                return
            idx, payload, results = item
            if isinstance(payload, BaseException):  # an earlier stage failed: pass it on
                self.owner._forward(self, idx, payload, results)
                continue
            self.owner.thread_local_data.micro_batch_idx = idx
            try:
                out = fn(payload)
            except BaseException as e:  # pylint: disable=broad-except
                out = e
            self.owner._forward(self, idx, out, results)


class MicroBatching:
    def __init__(self, parent_handler, micro_batch_size=1, parallelism=None):
        self.handler = parent_handler
        self.micro_batch_size = micro_batch_size
        self.thread_local_data = threading.local()
        self._parallelism = {}
        self._stages = [_Stage(self, m) for m in HANDLER_METHODS]
        self.parallelism = dict(parallelism or {})

    @property
    def parallelism(self):
        return dict(self._parallelism)

    @parallelism.setter
    def parallelism(self, parallelism):
        unknown = set(parallelism) - set(HANDLER_METHODS)
        if unknown:
            raise ValueError(f"micro batching parallelism: unknown steps {sorted(unknown)} "
                             f"(the steps are {HANDLER_METHODS})")
        for step, n in parallelism.items():
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"micro batching parallelism: {step} needs at least 1 thread, "
                                 f"got {n!r}")
        self._parallelism.update(parallelism)
        for stage in self._stages:
            stage.resize(self._parallelism.get(stage.method, 1))

    def shutdown(self):
        for stage in self._stages:
            stage.resize(0)

    def get_micro_batch_idx(self):
        return getattr(self.thread_local_data, "micro_batch_idx", None)

    def _forward(self, stage, idx, out, results):
        pos = self._stages.index(stage)
        if pos + 1 < len(self._stages):
            self._stages[pos + 1].inbox.put((idx, out, results))
        else:
            results.put((idx, out))

    def handle(self, data):
        size = max(1, int(self.micro_batch_size))
        results = queue.Queue()  # this call's: calls on other threads do not mix
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        for idx, chunk in enumerate(chunks):
            self._stages[0].inbox.put((idx, chunk, results))
        done = dict(results.get() for _ in chunks)
        out = []
        for idx in range(len(chunks)):
            if isinstance(done[idx], BaseException):
                raise done[idx]
            out.extend(done[idx])
        return out

    def __call__(self, data, context):
        """The handler's entry point, as BaseHandler.handle, with the micro-batched pipeline."""
        start = time.time()
        self.handler.context = context
        if self.handler._is_describe():
            output = [self.handler.describe_handle()]
        elif self.handler._is_explain():
            output = self.handler.explain_handle(self.handler.preprocess(data), data)
        else:
            output = self.handle(data)
        context.metrics.add_time("HandlerTime", round((time.time() - start) * 1000, 2), None,
                                 "ms")
        return output
