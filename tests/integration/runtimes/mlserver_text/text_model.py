"""A streaming text runtime in the shape of MLServer's TextModel example (docs/examples/streaming),
written for torchserve-c's tests: predict_stream reads its requests, splits the text of the first
one's first input into words and yields one response per word, `delay_s` apart
(model-settings.json parameters.extra.delay_s; 0.5 s as in the example when unset)."""
import asyncio

from mlserver import MLModel
from mlserver.codecs import StringCodec
from mlserver.types import InferenceResponse


class TextModel(MLModel):
    async def load(self):
        extra = self.settings.parameters.extra if self.settings.parameters else {}
        self.delay_s = float((extra or {}).get("delay_s", 0.5))
        return True

    async def predict_stream(self, payloads):
        requests = [r async for r in payloads]
        text = StringCodec.decode_input(requests[0].inputs[0])[0]
        for i, word in enumerate(text.split(" ")):
            await asyncio.sleep(self.delay_s)
            yield InferenceResponse(
                model_name=self.name,
                outputs=[StringCodec.encode_output("output", [word if i == 0 else " " + word])],
            )

    async def predict(self, payload):
        text = StringCodec.decode_input(payload.inputs[0])[0]
        return InferenceResponse(
            model_name=self.name,
            outputs=[StringCodec.encode_output("output", [text.upper()])],
        )
