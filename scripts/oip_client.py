#!/usr/bin/python3
"""Open Inference Protocol client for torchserve-c (or any OIP server): REST infer,
infer_stream / generate_stream over SSE, and gRPC ModelInfer / ModelStreamInfer. Partial
results are printed as they arrive.

    scripts/oip_client.py infer mlp --body request.json
    scripts/oip_client.py infer_stream identity_text --text "What is the capital of France?"
    scripts/oip_client.py generate_stream char_lm --text "The " --max-tokens 40
    scripts/oip_client.py grpc_stream identity_text --text "one two three" --text "four five"
    scripts/oip_client.py grpc_infer mlp --tensor input__0:FP32:1,64:0.5

The request is an OIP JSON body (--body FILE, '-' for stdin), text (--text: a BYTES input
"prompt" of shape [1]; repeat it for several requests on one gRPC stream), or tensors
(--tensor NAME:DATATYPE:SHAPE:VALUES, values comma-separated, one value repeated to fill).
Text outputs print as text (chunks joined on one line); tensor outputs print as one JSON line
per response. Uses requests and the gRPC stubs that `make` writes to build/py.
"""
import argparse
import json
import os
import struct
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, os.environ.get("TS_BUILD", "build"), "py"))

INT_TYPES = {"INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64"}


def tensor_arg(spec):
    name, dtype, shape, values = spec.split(":", 3)
    shape = [int(d) for d in shape.split(",") if d]
    n = 1
    for d in shape:
        n *= d
    conv = (lambda v: v.lower() == "true") if dtype == "BOOL" else \
        int if dtype in INT_TYPES else str if dtype == "BYTES" else float
    vals = [conv(v) for v in values.split(",")]
    if len(vals) == 1:
        vals = vals * n
    return {"name": name, "datatype": dtype, "shape": shape, "data": vals}


def build_requests(a):
    """A list of OIP JSON requests from the command line."""
    if a.body:
        try:
            if a.body == "-":
                body = json.load(sys.stdin)
            else:
                with open(a.body) as f:
                    body = json.load(f)
        except OSError as e:
            sys.exit(f"oip_client.py: --body {a.body}: {e.strerror}")
        except ValueError as e:
            sys.exit(f"oip_client.py: --body {a.body}: not JSON: {e}")
        if not isinstance(body, (dict, list)) or \
                not all(isinstance(b, dict) for b in (body if isinstance(body, list) else [body])):
            sys.exit(f"oip_client.py: --body {a.body}: expected an OIP request object "
                     "(or a list of them)")
        return body if isinstance(body, list) else [body]
    params = {}
    if a.max_tokens is not None:
        params["max_tokens"] = a.max_tokens
    for kv in a.param or []:
        k, _, v = kv.partition("=")
        params[k] = json.loads(v) if v[:1] in "0123456789-[{tf\"" else v
    reqs = []
    for text in a.text or []:
        r = {"inputs": [{"name": "prompt", "shape": [1], "datatype": "BYTES", "data": [text]}]}
        reqs.append(r)
    if a.tensor:
        reqs.append({"inputs": [tensor_arg(t) for t in a.tensor]})
    if not reqs:
        sys.exit("give a request: --body, --text or --tensor")
    for r in reqs:
        if params:
            r["parameters"] = dict(r.get("parameters", {}), **params)
        if a.id:
            r["id"] = a.id
    return reqs


class Printer:
    """Text chunks on one line as they come; tensors as JSON lines."""

    def __init__(self, timing):
        self.t0 = time.time()
        self.timing = timing
        self.in_text = False

    def text(self, s):
        if self.timing:
            print(f"[{(time.time() - self.t0) * 1000:8.1f} ms] {s!r}", flush=True)
        else:
            sys.stdout.write(s)
            sys.stdout.flush()
            self.in_text = True

    def response(self, o):
        if "error" in o:
            self.end()
            print(f"error: {o['error']}", file=sys.stderr, flush=True)
            return
        if "text_output" in o:
            self.text(o["text_output"])
            return
        outs = o.get("outputs", [])
        if len(outs) == 1 and outs[0].get("datatype") == "BYTES" and len(outs[0]["data"]) == 1:
            self.text(outs[0]["data"][0])
            return
        self.end()
        print(json.dumps(o), flush=True)

    def end(self):
        if self.in_text:
            print(flush=True)
            self.in_text = False


# ---------------------------------------------------------------- REST

FMT = {"FP32": "f", "FP64": "d", "INT64": "q", "INT32": "i", "INT16": "h", "INT8": "b",
       "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "BOOL": "?", "FP16": "e"}


def raw_to_list(dtype, raw):
    if dtype == "BYTES":
        data, k = [], 0
        while k < len(raw):
            n = struct.unpack("<I", raw[k:k + 4])[0]
            data.append(raw[k + 4:k + 4 + n].decode(errors="replace"))
            k += 4 + n
        return data
    fmt = FMT.get(dtype)
    if not fmt:
        return raw.hex()
    return list(struct.unpack(f"<{len(raw) // struct.calcsize(fmt)}{fmt}", raw))


def decode_binary(r):
    """Triton's binary extension: JSON header, then the outputs' raw data in order."""
    n = int(r.headers["Inference-Header-Content-Length"])
    o = json.loads(r.content[:n])
    k = n
    for t in o.get("outputs", []):
        size = t.get("parameters", {}).get("binary_data_size")
        if size is not None:
            t["data"] = raw_to_list(t["datatype"], r.content[k:k + size])
            k += size
    return o


def auth(a):
    """The inference key: --token, else TS_TOKEN, else key_file.json in the working directory
    (the server writes it there when token authorization is on, its default)."""
    key = a.token or os.environ.get("TS_TOKEN")
    if not key and os.path.exists("key_file.json"):
        with open("key_file.json") as f:
            key = json.load(f).get("inference", {}).get("key")
    return {"authorization": f"Bearer {key}"} if key else {}


def rest(a, route):
    import requests
    p = Printer(a.timing)
    for body in build_requests(a):
        if route.startswith("generate") and "inputs" in body and a.text:
            body = {"text_input": body["inputs"][0]["data"][0],
                    "parameters": body.get("parameters", {})}
        ver = f"/versions/{a.version}" if a.version else ""
        url = f"{a.url}/v2/models/{a.model}{ver}/{route}"
        stream = route.endswith("_stream")
        try:
            r = requests.post(url, json=body, stream=stream, timeout=a.timeout,
                              headers=auth(a))
        except requests.RequestException as e:
            print(f"error: {url}: {e}", file=sys.stderr)
            return 1
        if not stream or not r.headers.get("Content-Type", "").startswith("text/event-stream"):
            try:
                o = decode_binary(r) if "Inference-Header-Content-Length" in r.headers \
                    else r.json()
            except ValueError:
                o = {"error": f"HTTP {r.status_code}: {r.text[:500]}"}
            p.response(o)
            p.end()
            if r.status_code >= 400:
                return 1
            continue
        event = None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                o = json.loads(line[5:].strip())
                if event == "error" and "error" not in o:
                    o = {"error": json.dumps(o)}
                p.response(o)
                event = None
        p.end()
    return 0


# ---------------------------------------------------------------- gRPC

def to_grpc(pb, model, version, body):
    q = pb.ModelInferRequest(model_name=model, model_version=version or "", id=body.get("id", ""))
    for k, v in body.get("parameters", {}).items():
        prm = q.parameters[k]
        if isinstance(v, bool):
            prm.bool_param = v
        elif isinstance(v, int):
            prm.int64_param = v
        elif isinstance(v, float):
            prm.double_param = v
        else:
            prm.string_param = str(v)
    for t in body["inputs"]:
        it = q.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        data = t["data"]
        while data and isinstance(data[0], list):
            data = [x for row in data for x in row]
        dt = t["datatype"]
        c = it.contents
        if dt == "BYTES":
            c.bytes_contents.extend(s.encode() if isinstance(s, str) else s for s in data)
        elif dt == "BOOL":
            c.bool_contents.extend(data)
        elif dt in ("INT8", "INT16", "INT32"):
            c.int_contents.extend(data)
        elif dt == "INT64":
            c.int64_contents.extend(data)
        elif dt in ("UINT8", "UINT16", "UINT32"):
            c.uint_contents.extend(data)
        elif dt == "UINT64":
            c.uint64_contents.extend(data)
        elif dt == "FP64":
            c.fp64_contents.extend(data)
        elif dt == "FP32":
            c.fp32_contents.extend(data)
        else:
            sys.exit(f"{dt} needs raw contents; this client sends contents only")
    for o in body.get("outputs", []):
        q.outputs.add(name=o["name"])
    return q


def from_grpc(r):
    outs = []
    for i, t in enumerate(r.outputs):
        c = t.contents
        if r.raw_output_contents:
            data = raw_to_list(t.datatype, r.raw_output_contents[i])
        else:
            data = ([b.decode(errors="replace") for b in c.bytes_contents] or
                    list(c.fp32_contents) or list(c.fp64_contents) or list(c.int_contents) or
                    list(c.int64_contents) or list(c.uint_contents) or list(c.uint64_contents) or
                    list(c.bool_contents))
        outs.append({"name": t.name, "datatype": t.datatype, "shape": list(t.shape), "data": data})
    return {"model_name": r.model_name, "model_version": r.model_version, "id": r.id,
            "outputs": outs}


def grpc_call(a, streaming):
    import grpc
    import oip_grpc_pb2 as pb
    import oip_grpc_pb2_grpc as pbg
    stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(a.grpc))
    reqs = [to_grpc(pb, a.model, a.version, b) for b in build_requests(a)]
    p = Printer(a.timing)
    try:
        if not streaming:
            for q in reqs:
                p.response(from_grpc(stub.ModelInfer(q, timeout=a.timeout,
                                                     metadata=list(auth(a).items()))))
                p.end()
            return 0
        last = None
        for r in stub.ModelStreamInfer(iter(reqs), timeout=a.timeout,
                                       metadata=list(auth(a).items())):
            if r.error_message:
                p.response({"error": r.error_message})
                continue
            o = from_grpc(r.infer_response)
            if last is not None and o["id"] != last:
                p.end()
            last = o["id"]
            p.response(o)
        p.end()
    except grpc.RpcError as e:
        p.end()
        print(f"error: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["infer", "infer_stream", "generate", "generate_stream",
                                        "grpc_infer", "grpc_stream"])
    ap.add_argument("model")
    ap.add_argument("--version", default="")
    ap.add_argument("--body", help="OIP request JSON file ('-' = stdin; a list = several)")
    ap.add_argument("--text", action="append", help="a text request (repeatable)")
    ap.add_argument("--tensor", action="append", help="NAME:DATATYPE:SHAPE:VALUES")
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("--param", action="append", help="request parameter KEY=VALUE")
    ap.add_argument("--id", help="request id")
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--grpc", default="127.0.0.1:7070")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--timing", action="store_true", help="print each partial with its time")
    ap.add_argument("--token", help="inference key (default: TS_TOKEN, or ./key_file.json)")
    a = ap.parse_args()
    if a.command.startswith("grpc_"):
        return grpc_call(a, a.command == "grpc_stream")
    return rest(a, a.command)


if __name__ == "__main__":
    sys.exit(main())
