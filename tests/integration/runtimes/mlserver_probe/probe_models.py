"""MLServer runtimes that probe torchserve-c's runtime host (tests/integration/test_mlserver.py).
Each is an mlserver.MLModel as a user would write it; model-settings.json picks the class."""
import asyncio
import itertools
import os

from mlserver import MLModel
from mlserver.codecs import NumpyCodec, StringCodec
from mlserver.errors import InferenceError
from mlserver.types import InferenceResponse, ResponseOutput

_calls = itertools.count()


class Echo(MLModel):
    """stream->stream: one response per request message, as it arrives. Each names its call
    (predict_stream calls of this worker, counted) and its index in the call's iterator."""

    async def predict_stream(self, payloads):
        call = next(_calls)
        i = 0
        async for req in payloads:
            x = NumpyCodec.decode_input(req.inputs[0])
            yield InferenceResponse(
                model_name=self.name,
                outputs=[
                    NumpyCodec.encode_output("y", x * 2 + i),
                    StringCodec.encode_output("tag", [f"call{call} message{i}"]),
                ],
            )
            i += 1


async def _gate(path):
    while not os.path.exists(path):
        await asyncio.sleep(0.01)


class Gated(MLModel):
    """The words of the prompt, word k only once the file <gate_dir>/<k> exists (request
    parameter gate_dir): a client that opens gate k+1 only after it read word k sees every word
    as it is produced, or never sees the end. A cancelled call leaves <gate_dir>/cancelled."""

    async def predict_stream(self, payloads):
        req = await payloads.__anext__()
        gate = req.parameters.gate_dir
        words = StringCodec.decode_input(req.inputs[0])[0].split(" ")
        try:
            for k, w in enumerate(words):
                await asyncio.wait_for(_gate(os.path.join(gate, str(k))), 30)
                yield InferenceResponse(
                    model_name=self.name,
                    outputs=[StringCodec.encode_output("output", [w if k == 0 else " " + w])],
                )
        except asyncio.CancelledError:
            open(os.path.join(gate, "cancelled"), "w").close()
            raise


class Barrier(MLModel):
    """Every predict_stream waits until `parties` (parameters.extra) of them run at once, then
    answers three responses: calls run one after another would time out instead."""

    async def load(self):
        self.parties = int(self.settings.parameters.extra["parties"])
        self.active = 0
        self.peak = 0
        self.everyone = asyncio.Event()
        return True

    async def predict_stream(self, payloads):
        await payloads.__anext__()
        self.active += 1
        self.peak = max(self.peak, self.active)
        if self.active >= self.parties:
            self.everyone.set()
        try:
            await asyncio.wait_for(self.everyone.wait(), 20)
            for k in range(3):
                await asyncio.sleep(0.01)
                yield InferenceResponse(
                    model_name=self.name,
                    outputs=[StringCodec.encode_output("peak", [f"{self.peak}"])],
                )
        finally:
            self.active -= 1


class Faulty(MLModel):
    """Fails as its prompt says: predict raises InferenceError ("refuse") or RuntimeError
    ("crash"); predict_stream answers one word, then raises ("raise"), yields a value that is
    not a response ("not-a-response") or a response whose data does not fill its shape
    ("bad-shape"); "early" raises before any response. Anything else: one word."""

    def _ok(self, text):
        return InferenceResponse(
            model_name=self.name, outputs=[StringCodec.encode_output("output", [text])]
        )

    async def predict(self, payload):
        mode = StringCodec.decode_input(payload.inputs[0])[0]
        if mode == "refuse":
            raise InferenceError("the runtime refuses this input")
        if mode == "crash":
            raise RuntimeError("the runtime crashed")
        return self._ok(mode)

    async def predict_stream(self, payloads):
        mode = StringCodec.decode_input((await payloads.__anext__()).inputs[0])[0]
        if mode == "early":
            raise RuntimeError("the runtime failed before answering")
        yield self._ok("first")
        if mode == "raise":
            raise RuntimeError("the runtime failed after one word")
        if mode == "not-a-response":
            yield 42
        if mode == "bad-shape":
            yield InferenceResponse(
                model_name=self.name,
                outputs=[ResponseOutput(name="o", shape=[3], datatype="FP32", data=[1.0])],
            )
