#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/corpus/ that are generated rather than copied: OTF
frames (through tests/integration/otf.py), request bodies, protobuf messages (through the
Python stubs of BUILD/py), small archives and OIP payloads. Regression inputs that a fuzzer
found are committed next to them by hand (names start with "crash-" or "regress-").

    /usr/bin/python3 tests/fuzz/seeds.py [BUILD]    (BUILD defaults to build; `make pystubs`)
"""
import gzip
import io
import json
import os
import struct
import sys
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import otf  # noqa: E402

CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def copy(target, name, path):
    with open(os.path.join(ROOT, path), "rb") as f:
        put(target, name, f.read())


def i32(v):
    return struct.pack("!i", v)


def s(b):
    if isinstance(b, str):
        b = b.encode()
    return i32(len(b)) + b


def prediction(req_id, body, status=200, headers=(), ctype="application/json", phrase=""):
    out = s(req_id) + s(ctype) + i32(status) + s(phrase) + i32(len(headers))
    for k, v in headers:
        out += s(k) + s(v)
    return out + s(body)


def otf_seeds():
    put("otf_command", "load", otf.encode_load("mlp", "/tmp/models/mlp", 8, "torchscript"))
    put("otf_command", "infer", otf.encode_infer([
        ("req-1", {"content-type": "application/json"}, [("body", "application/json", '{"data": [1, 2]}')]),
        ("req-2", [("ts_request_sequence_id", "ts-seq-1")], [("data", "", "hello")]),
    ]))
    put("otf_command", "cancel", otf.encode_cancel(["req-1", "req-2"]))
    put("otf_command", "pause", b"P" + s("req-1") + i32(-1))
    put("otf_command", "resume", b"R" + s("req-1") + i32(-1))
    put("otf_command", "seq_event", otf.encode_seq_event("ts-seq-1", 2))
    put("otf_command", "input", otf.encode_input("req-1", "application/x-ts-oip", b"OIP1\0\0\0\0"))
    put("otf_command", "input_end", otf.encode_input_end(["req-1", "req-2"]))
    put("otf_response", "load_ok", i32(200) + s("loaded") + i32(-1))
    put("otf_response", "batch", i32(200) + s("Prediction success")
        + prediction("req-1", "[0.1, 0.2]") + prediction("req-2", "oops", 507, phrase="bad") + i32(-1))
    put("otf_response", "stream", i32(200) + s("")
        + prediction("req-1", "word", headers=[("ts_stream_next", "true")], ctype="text/plain") + i32(-1))
    # what our worker appends: x-ts-worker-batch, the handler's metric records, the step's times
    records = (b"c\x05\x05WordsCount" + struct.pack("!d", 3.0)
               + b"h\x07\x00Latency" + struct.pack("!d", 1.5))
    put("otf_response", "metrics", i32(200) + s("Prediction success")
        + prediction("req-1", "[0.1]", headers=[("x-ts-worker-batch", "1"),
                                                ("ts_worker_metrics", records),
                                                ("ts_worker_step", struct.pack("!qq", 120, 150))])
        + i32(-1))


def oip_payload(header, raw=b""):
    h = json.dumps(header).encode()
    return b"OIP1" + struct.pack("<I", len(h)) + h + raw


def oip_wire_seeds():
    # first byte: 0 = a worker's answer ("outputs"), 1 = the frontend's request ("inputs")
    put("oip_wire", "answer_fp32", b"\0" + oip_payload(
        {"outputs": [{"name": "out", "datatype": "FP32", "shape": [1, 2], "size": 8}]},
        struct.pack("<2f", 0.5, -1.0)))
    put("oip_wire", "answer_params", b"\0" + oip_payload(
        {"parameters": {"x": 1}, "outputs": [{"name": "o", "datatype": "INT64", "shape": [1], "size": 8}]},
        struct.pack("<q", 7)))
    put("oip_wire", "request_bytes", b"\1" + oip_payload(
        {"id": "r1", "outputs": ["out"], "inputs": [
            {"name": "text", "datatype": "BYTES", "shape": [2], "size": 10},
            {"name": "b", "datatype": "BOOL", "shape": [2], "size": 2}]},
        struct.pack("<I", 1) + b"a" + struct.pack("<I", 1) + b"b" + b"\1\0"))


def json_seeds():
    with open(os.path.join(ROOT, "scripts/models/mlp/sample.json"), "rb") as f:
        put("tjson", "mlp_sample.json", f.read())
    for name, body in [("nested", '{"data": [[1, 2.5, -3], [4, 5, 6e1]]}'),
                       ("instances", '{"instances": [[0.1, 0.2], [0.3, 0.4]]}'),
                       ("bare", "[1e-3, -0.0, 123456789012, 3.4028235e38, 1e-45]"),
                       ("number", "42"),
                       ("ragged", "[[1, 2], [3]]"),
                       ("two_keys", '{"data": [1], "extra": true}')]:
        put("tjson", name, body)
    for name, tok in [("int", "-123456789012345678"), ("frac", "0.30000000000000004"),
                      ("exp", "1.17549435e-38"), ("tiny", "1e-46"), ("big", "3.4028236e38"),
                      ("digits", "1.0000000596046447753906250000000001")]:
        put("jnum", name, tok)

    oip = '{"id": "1", "inputs": [{"name": "x", "shape": [1, 4], "datatype": "FP32", "data": [[1, 2, 3, 4]]}]}'
    # first byte: bit 0 = binary extension (then the next two bytes are the JSON length), bit 1 = /generate
    put("oip_json", "fp32", b"\0" + oip.encode())
    put("oip_json", "types", b"\0" + json.dumps({"inputs": [
        {"name": "a", "shape": [2], "datatype": "INT8", "data": [-128, 127]},
        {"name": "b", "shape": [2], "datatype": "BOOL", "data": [True, False]},
        {"name": "c", "shape": [1], "datatype": "BYTES", "data": ["hi"]},
        {"name": "d", "shape": [2], "datatype": "FP16", "data": [0.5, 65504]},
        {"name": "e", "shape": [1], "datatype": "UINT64", "data": [9007199254740993]},
        {"name": "f", "shape": [1], "datatype": "FP64", "data": [1e300]}],
        "outputs": [{"name": "y", "parameters": {"binary_data": True}}],
        "parameters": {"binary_data_output": False, "ts_request_sequence_id": "s1"}}).encode())
    put("oip_json", "data_first", b"\0" + b'{"inputs": [{"data": [1, 2], "name": "x", "shape": [2], "datatype": "UINT16", "parameters": {"k": "v"}}]}')
    put("oip_json", "generate", b"\2" + b'{"text_input": "What is the capital of France?", "parameters": {"max_tokens": 3}}')
    hdr = b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}]}'
    put("oip_json", "binary", b"\1" + struct.pack("<H", len(hdr)) + hdr + struct.pack("<2f", 1.0, 2.0))


def pb_seeds(build):
    sys.path.insert(0, os.path.join(ROOT, build, "py"))
    import inference_pb2 as inf  # noqa: E402
    import management_pb2 as mg  # noqa: E402
    import oip_grpc_pb2 as oip  # noqa: E402
    # first byte: the request type, in the order of tests/fuzz/grpc_pb.c's table
    msgs = [
        ("predictions", 0, inf.PredictionsRequest(model_name="mlp", model_version="1.0",
                                                  input={"data": b"[1, 2]", "ts_request_sequence_start": b"true"},
                                                  sequence_id="seq-1")),
        ("describe", 1, mg.DescribeModelRequest(model_name="mlp", customized=True)),
        ("list", 2, mg.ListModelsRequest(limit=10, next_page_token=2)),
        ("register", 3, mg.RegisterModelRequest(url="mlp.mar", model_name="mlp", initial_workers=1,
                                                synchronous=True, batch_size=4, max_batch_delay=50)),
        ("scale", 4, mg.ScaleWorkerRequest(model_name="mlp", min_worker=1, max_worker=2)),
        ("set_default", 5, mg.SetDefaultRequest(model_name="mlp", model_version="2.0")),
        ("unregister", 6, mg.UnregisterModelRequest(model_name="mlp", model_version="1.0")),
        ("model_ready", 7, oip.ModelReadyRequest(name="mlp", version="1")),
        ("model_metadata", 8, oip.ModelMetadataRequest(name="mlp")),
    ]
    infer = oip.ModelInferRequest(model_name="mlp", id="r1")
    t = infer.inputs.add(name="x", datatype="FP32", shape=[1, 2])
    t.contents.fp32_contents.extend([1.0, 2.0])
    t.parameters["p"].int64_param = 3
    infer.parameters["ts_request_sequence_id"].string_param = "s1"
    infer.outputs.add(name="y")
    msgs.append(("infer_contents", 9, infer))
    raw = oip.ModelInferRequest(model_name="mlp")
    raw.inputs.add(name="t", datatype="BYTES", shape=[1])
    raw.raw_input_contents.append(struct.pack("<I", 2) + b"hi")
    msgs.append(("infer_raw", 9, raw))
    for name, kind, m in msgs:
        put("grpc_pb", name, bytes([kind]) + m.SerializeToString(deterministic=True))


def http_seeds():
    put("http_guard", "post", "/predictions/mlp/1.0?x=1\nContent-Type: application/json\nContent-Length: 14\n")
    put("http_guard", "chunked", "/v2/models/mlp/infer\nTransfer-Encoding: chunked\nAccept: text/event-stream\n")
    put("http_guard", "bad", "/models/a%00b\nContent-Length: 1\nContent-Length: 2\nTransfer-Encoding: gzip\n")


def zip_put(z, name, data, method):
    zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))  # the same bytes every run
    zi.compress_type = method
    z.writestr(zi, data)


def archive_seeds():
    # first byte: 0 = the bytes are the archive, 1 = gzip the rest (a tar the fuzzer mutates in clear)
    manifest = json.dumps({"createdOn": "01/01/2024 00:00:00", "runtime": "python",
                           "model": {"modelName": "mlp", "serializedFile": "mlp.pt",
                                     "handler": "torchscript", "modelVersion": "1.0"},
                           "archiverVersion": "0.1"}, indent=2).encode()
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w") as z:
        zip_put(z, "MAR-INF/MANIFEST.json", manifest, zipfile.ZIP_STORED)
        zip_put(z, "mlp.pt", b"not really torchscript", zipfile.ZIP_STORED)
        zip_put(z, "model-config.yaml", b"batchSize: 4\n", zipfile.ZIP_STORED)
    put("archive", "mar_stored", b"\0" + zb.getvalue())
    zb = io.BytesIO()
    with zipfile.ZipFile(zb, "w") as z:
        zip_put(z, "MAR-INF/MANIFEST.json", manifest, zipfile.ZIP_DEFLATED)
        zip_put(z, "dir/", b"", zipfile.ZIP_STORED)
        zip_put(z, "dir/file.txt", b"hello " * 50, zipfile.ZIP_DEFLATED)
    put("archive", "mar_deflated", b"\0" + zb.getvalue())
    tb = io.BytesIO()
    with tarfile.open(fileobj=tb, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data in [("MAR-INF/MANIFEST.json", manifest), ("a/b.txt", b"b")]:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        for name, target, kind in [("a/link", "b.txt", tarfile.SYMTYPE), ("hard", "a/b.txt", tarfile.LNKTYPE)]:
            ti = tarfile.TarInfo(name)
            ti.type = kind
            ti.linkname = target
            t.addfile(ti)
    put("archive", "tar_links", b"\1" + tb.getvalue())
    put("archive", "tgz", b"\0" + gzip.compress(tb.getvalue(), mtime=0))
    put("manifest", "manifest.json", manifest)
    put("manifest", "numbers.json", '{"model": {"modelName": "m", "modelVersion": 2, "handler": 1.5}}')


def config_seeds():
    copy("properties", "config.properties", "config.properties")
    put("properties", "java_syntax", "# comment\n! also\nkey1 = value1\nkey2:value2\nkey3 value3\n"
        "long = a\\\n    b\\\n  c\nesc\\ key=\\u0041\\t\\n\nenv=$$HOME$$/x\n"
        "inference_address=https://[::1]:8443/\nmodels={\"mlp\": {\"1.0\": {\"minWorkers\": 1}}}\n")
    for m in ["mlp", "char_lm", "stateful", "identity_text", "lstm_stateful", "tiny_gpt"]:
        copy("yaml", m + ".yaml", "scripts/models/%s/model-config.yaml" % m)
    put("yaml", "lists", "minWorkers: 1\nmaxWorkers: 2\ndeviceIds: [0, 1]\nhandler:\n  inputs:\n"
        "    - {name: x, datatype: FP32, shape: [-1, 64]}\n  cache: {capacity: 8}\n"
        "sequenceBatching: yes\n---\nsecond: doc\n")


def metric_line_seeds():
    """The text after "[METRICS]" of lines as TorchServe's caching_metric.py and ours write them."""
    put("metric_line", "gauge_dims_ids", "HandlerMethodTime.ms:9.39|#MethodName:preprocess,"
        "ModelName:mnist,Level:Model|#type:GAUGE|#hostname:h1,1717105563,4a2f-1,4a2f-2")
    put("metric_line", "counter_no_dims", "InferenceRequestCount.count:1|#|#type:COUNTER|"
        "#hostname:h,1717105563")
    put("metric_line", "histogram", "ExamplePercentMetric.percent:50|#ModelName:m,Level:Model|"
        "#type:HISTOGRAM|#hostname:h,1,r1")
    put("metric_line", "no_type", "PredictionTime.Milliseconds:2.5|#ModelName:m,Level:Model|"
        "#hostname:h,7")


def llm_seeds():
    # openai_req: the route byte (1: chat), then the body
    put("openai_req", "completion", b"\0" + json.dumps({
        "model": "tiny_gpt", "prompt": "The keeper", "max_tokens": 20, "temperature": 0,
        "stop": ["\n\n", "END"], "seed": 7, "stream": True,
        "stream_options": {"include_usage": True}}).encode())
    put("openai_req", "chat", b"\1" + json.dumps({
        "model": "tiny_gpt", "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "Tell me"}]}],
        "max_completion_tokens": 8, "top_p": 0.9, "n": 1, "logprobs": False,
        "response_format": {"type": "text"}}).encode())
    put("openai_req", "refused", b"\0" + json.dumps({
        "model": "m", "prompt": ["a", "b"], "n": 2, "tools": [], "echo": True}).encode())
    # textstop: stops count, their lengths, their bytes, the text
    put("textstop", "two_stops", b"\2\x02\x03\n\nEND" + "one two\n\nthree caf\u00e9".encode())
    put("textstop", "utf8", b"\0" + "\u20ac\u00e9 \xf0\x9f\x98\x80".encode("utf-8", "surrogatepass")
        + b"\xc3\x28\xe2\x82")
    # textgen_req: flags (1: JSON content type, 2: a max_new_tokens parameter), the body
    put("textgen_req", "json", b"\1" + json.dumps({
        "prompt": "The keeper", "max_new_tokens": 40, "temperature": 0.8, "top_p": 0.9,
        "seed": 3, "stop": ["\n"], "parameters": {"seed": 4, "stop": "x"}}).encode())
    put("textgen_req", "text", b"\2" + b"12\0" + b"plain prompt text")
    put("textgen_req", "oip_text_body", b"\1" + json.dumps({
        "text": "p", "prompt": "p", "max_new_tokens": 5, "parameters": {"max_tokens": 5}}).encode())


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    llm_seeds()
    otf_seeds()
    oip_wire_seeds()
    json_seeds()
    http_seeds()
    archive_seeds()
    config_seeds()
    metric_line_seeds()
    pb_seeds(build)


if __name__ == "__main__":
    main()
