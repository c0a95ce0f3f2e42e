"""stateful_py's handler: TorchServe's stateful continuous-batching example, written against the
handler contract (BaseHandler, context.get_sequence_id, context.cache, stopping_criteria).

Each request of a sequence carries an integer (text, or JSON: 3, "3", [3], {"input": 3}). The
sequence's start request sets its running sum to 0; every request adds its integer and answers
the new sum.
  0   ends the sequence (response header ts_request_sequence_end);
  -1  cancels it: the answer is -1 with ts_request_sequence_cancel: true, and a stream of the
      same sequence that is still running ends at its next step;
  odd numbers stream: the sum is answered handler.stream_steps times, one step apart
      (handler.stream_delay_ms), the last one ending the stream; even numbers answer once.
"""

import json
import logging
import time

from ts.torch_handler.base_handler import BaseHandler

logger = logging.getLogger(__name__)


def _value(row):
    v = row.get("data")
    if v is None:
        v = row.get("body")
    if isinstance(v, (bytes, bytearray)):
        v = v.decode("utf-8")
    if isinstance(v, str):
        v = json.loads(v)
    if isinstance(v, list) and len(v) == 1:
        v = v[0]
    if isinstance(v, dict):
        v = v.get("input", v.get("data"))
    if isinstance(v, str):
        v = v.strip()
    if isinstance(v, bool) or v is None:
        raise ValueError(f"expected an integer, got {v!r}")
    return int(v)


class StatefulHandler(BaseHandler):
    def initialize(self, context):
        self.context = context
        cfg = (context.model_yaml_config or {}).get("handler") or {}
        self.steps = max(1, int(cfg.get("stream_steps", 5)))
        self.delay = max(0, int(cfg.get("stream_delay_ms", 50))) / 1000.0
        self.streaming = bool((context.model_yaml_config or {}).get("continuousBatching"))
        # sequence id -> running sum
        self.sums = {}
        # context.cache: sequence id -> {"cancel", "end"}; request id -> its stream
        context.cache = {}
        self.initialized = True

    def preprocess(self, data):
        ctx = self.context
        results = []
        stepping = False
        for idx, row in enumerate(data):
            seq = ctx.get_sequence_id(idx)
            req = ctx.get_request_id(idx)
            ctx.set_response_header(idx, ctx.header_key_sequence_id, seq)
            if req in ctx.cache:  # a stream continuing
                stepping = True
                results.append(self.sums.get(seq, ctx.cache[req]["sum"]))
                continue
            start = (ctx.get_request_header(idx, ctx.header_key_sequence_start) or "").lower()
            start = start not in ("", "false", "0")
            # torchserve-c tells a handler that its server opened this sequence for an id the
            # client chose (TorchServe's frontend sets the start header only for ids it makes):
            # a sequence this worker has no sum for starts from zero then
            new = (ctx.get_request_header(idx, "ts_request_sequence_new") or "").lower()
            if new not in ("", "false", "0") and seq not in self.sums:
                start = True
            if start or seq not in ctx.cache:
                ctx.cache[seq] = {"cancel": False, "end": False, "requests": 0}
                if start:
                    self.sums[seq] = 0
            v = _value(row)
            entry = {"seq": seq, "stream": False, "left": self.steps, "sum": None}
            ctx.cache[req] = entry
            ctx.cache[seq]["requests"] += 1
            if v == -1:
                ctx.cache[seq]["cancel"] = True
                ctx.set_response_header(idx, "ts_request_sequence_cancel", "true")
                self.sums.pop(seq, None)
                results.append(-1)
                continue
            if seq not in self.sums:
                logger.error("sequence %s: no start request was seen; closing it", seq)
                ctx.cache[seq]["end"] = True
                ctx.set_response_header(idx, ctx.header_key_sequence_end, seq)
                results.append(v)
                continue
            self.sums[seq] += v
            entry["sum"] = self.sums[seq]
            if v == 0:
                ctx.cache[seq]["end"] = True
                ctx.set_response_header(idx, ctx.header_key_sequence_end, seq)
                self.sums.pop(seq, None)
            elif v % 2 == 1 and self.streaming:
                entry["stream"] = True
            results.append(entry["sum"])
        if stepping and self.delay:
            time.sleep(self.delay)
        return results

    def inference(self, data, *args, **kwargs):
        return data

    def postprocess(self, data):
        ctx = self.context
        ctx.stopping_criteria = [self._criterion(req) for req in ctx.request_ids.values()]
        return data

    def _criterion(self, req):
        ctx = self.context

        def done():
            entry = ctx.cache.pop(req)
            seq = ctx.cache[entry["seq"]]
            seq["requests"] -= 1
            if seq["requests"] == 0 and (seq["cancel"] or seq["end"]):
                del ctx.cache[entry["seq"]]

        def stop(_result):
            entry = ctx.cache[req]
            seq = ctx.cache[entry["seq"]]
            if not entry["stream"]:
                done()
                return None  # a plain answer
            entry["left"] -= 1
            if entry["left"] <= 0 or seq["cancel"] or seq["end"]:
                done()
                return True  # the stream ends with this result
            return False  # streamed; the request goes on at the next step

        return stop
