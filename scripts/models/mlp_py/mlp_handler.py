"""mlp_py's handler: TorchServe's BaseHandler with JSON in and out.

A request body is one sample, a JSON list of 64 numbers (or {"data": [...]}); the answer is the
model's 10 outputs as a JSON list. The requests of a batch run as one forward.
"""

import json

import torch

from ts.torch_handler.base_handler import BaseHandler


class MLPHandler(BaseHandler):
    def preprocess(self, data):
        rows = []
        for i, row in enumerate(data):
            x = row.get("data") if row.get("data") is not None else row.get("body")
            if isinstance(x, (bytes, bytearray)):
                x = json.loads(x)
            if isinstance(x, dict):
                x = x.get("data", x.get("input"))
            if not isinstance(x, list) or len(x) != 64:
                raise ValueError(f"request {i}: expected 64 numbers, got {str(x)[:40]}")
            rows.append(x)
        return torch.tensor(rows, dtype=torch.float32)

    def postprocess(self, data):
        return data.tolist()
