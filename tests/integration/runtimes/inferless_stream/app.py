# The example app.py of Inferless' "Streaming with SSE Events" page, as torchserve-c's tests run
# it: the same class, thread and streamer loop. There is no transformers or AWQ here, so the model
# is a stand-in: StandInModel.generate produces the reply's tokens from a thread into a
# TextIteratorStreamer-like queue, as transformers' generate(streamer=...) does; no .cuda().
import os
import queue
import time
from threading import Thread

MODEL_NAME = "stand-in/cooking-agent"


class TextIteratorStreamer:
    """Iterates the text a generating thread puts into it; ends when generation ends."""

    def __init__(self, tokenizer=None, skip_prompt=True, skip_special_tokens=True):
        self.queue = queue.Queue()
        self.stop_signal = object()

    def put(self, text):
        self.queue.put(text)

    def end(self):
        self.queue.put(self.stop_signal)

    def __iter__(self):
        return self

    def __next__(self):
        value = self.queue.get()
        if value is self.stop_signal:
            raise StopIteration()
        return value


class StandInModel:
    """Answers a chat: the user's words, reversed, one token per word, delay_s apart. When the
    app's folder has a directory "gate" (the tests' "each as produced" check), token k waits for
    the file gate/<k> instead."""

    delay_s = 0.05
    gate = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gate")

    def generate(self, inputs, streamer, max_new_tokens=1024, **kwargs):
        words = inputs[-1]["content"].split()[::-1][:max_new_tokens]
        try:
            for i, w in enumerate(words):
                if os.path.isdir(self.gate):
                    deadline = time.monotonic() + 30
                    while not os.path.exists(os.path.join(self.gate, str(i))):
                        if time.monotonic() > deadline:
                            return
                        time.sleep(0.01)
                else:
                    time.sleep(self.delay_s)
                streamer.put(w if i == 0 else " " + w)
        finally:
            streamer.end()


class InferlessPythonModel:
    def initialize(self):
        self.model = StandInModel()
        self.streamer = TextIteratorStreamer(None, skip_prompt=True, skip_special_tokens=True)

    def infer(self, inputs, stream_output_handler):
        prompt = inputs["TEXT"]
        messages = [{"role": "system", "content": "You are an agent that know about about cooking."}]
        messages.append({"role": "user", "content": prompt})
        generation_kwargs = dict(
            inputs=messages,
            streamer=self.streamer,
            do_sample=True,
            temperature=0.9,
            top_p=0.95,
            repetition_penalty=1.2,
            max_new_tokens=1024,
        )
        thread = Thread(target=self.model.generate, kwargs=generation_kwargs)
        thread.start()
        for new_text in self.streamer:
            output_dict = {}
            output_dict["OUT"] = new_text
            # Sent the partial response as an event
            stream_output_handler.send_streamed_output(output_dict)
        thread.join()
        # Call this to close the stream, If not called can lead to the issue of request not being released
        stream_output_handler.finalise_streamed_output()
        # perform any cleanup activity here

    def finalize(self, args):
        self.pipe = None
