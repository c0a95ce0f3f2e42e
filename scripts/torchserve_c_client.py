#!/usr/bin/python3
"""Command-line gRPC client for torchserve-c (and TorchServe): the commands of TorchServe's
ts_scripts/torchserve_grpc_client.py, plus scale, list and describe.

    torchserve_c_client.py infer         MODEL INPUT_FILE
    torchserve_c_client.py infer_stream  MODEL INPUT_FILE
    torchserve_c_client.py infer_stream2 MODEL SEQUENCE_ID FILE1,FILE2,...
    torchserve_c_client.py register      MODEL [MAR_SET]     (MAR_SET: a,b.mar,... in the store)
    torchserve_c_client.py unregister    MODEL [VERSION]
    torchserve_c_client.py scale         MODEL --min-worker N [--max-worker M] [--sync]
    torchserve_c_client.py list          [--limit N] [--next-page-token T]
    torchserve_c_client.py describe      MODEL [VERSION]

Options: --host (localhost), --port (7070 for infer*, 7071 for the rest), --token KEY (sent as
`authorization: Bearer KEY`; --auth-token is accepted too), --input-name (data).
Inputs are sent as PredictionsRequest.input[--input-name] = the file's bytes ("-" = stdin).
The stubs are generated at build time into build/py (`make`); the exit code is 0 on success
and 1 on a gRPC error, whose code and details are printed on stderr.
"""
import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", os.environ.get("TS_BUILD", "build"), "py"))

import grpc  # noqa: E402
import inference_pb2  # noqa: E402
import inference_pb2_grpc  # noqa: E402
import management_pb2  # noqa: E402
import management_pb2_grpc  # noqa: E402
from google.protobuf import empty_pb2  # noqa: E402

INFERENCE_COMMANDS = ("infer", "infer_stream", "infer_stream2", "ping")


def read_input(path):
    if path == "-":
        return sys.stdin.buffer.read()
    with open(path, "rb") as f:
        return f.read()


def show(data):
    sys.stdout.write(data.decode("utf-8", errors="replace"))
    if not data.endswith(b"\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def cmd_ping(stub, args, md):
    print(stub.Ping(empty_pb2.Empty(), metadata=md).health)


def request(args, data, sequence_id=None):
    kw = dict(model_name=args.model_name, model_version=args.model_version or "",
              input={args.input_name: data})
    if sequence_id:
        kw["sequence_id"] = sequence_id
    return inference_pb2.PredictionsRequest(**kw)


def cmd_infer(stub, args, md):
    r = stub.Predictions(request(args, read_input(args.model_input)), metadata=md)
    show(r.prediction)


def cmd_infer_stream(stub, args, md):
    for r in stub.StreamPredictions(request(args, read_input(args.model_input)), metadata=md):
        sys.stdout.write(r.prediction.decode("utf-8", errors="replace"))
        sys.stdout.flush()
    sys.stdout.write("\n")


def cmd_infer_stream2(stub, args, md):
    files = [f.strip() for f in args.input_files.split(",") if f.strip()]
    reqs = (request(args, read_input(f), args.sequence_id) for f in files)
    failed = False
    for r in stub.StreamPredictions2(reqs, metadata=md):
        if r.HasField("status") and r.status.code != 0:
            failed = True
            print(f"error {r.status.code}: {r.status.message}", file=sys.stderr)
        else:
            show(r.prediction)
    print("Sequence completed!")
    return 1 if failed else 0


def cmd_register(stub, args, md):
    url = f"{args.model_name}.mar"
    if args.mar_set:
        # [name=]location entries, as TorchServe's client: the one for this model wins
        for entry in args.mar_set.split(","):
            name, _, loc = entry.strip().rpartition("=")
            if name == args.model_name or (not name and loc == f"{args.model_name}.mar"):
                url = loc
    r = stub.RegisterModel(management_pb2.RegisterModelRequest(
        url=url, model_name=args.model_name, initial_workers=args.initial_workers,
        synchronous=not args.no_sync), metadata=md)
    print(r.msg)


def cmd_unregister(stub, args, md):
    r = stub.UnregisterModel(management_pb2.UnregisterModelRequest(
        model_name=args.model_name, model_version=args.model_version or ""), metadata=md)
    print(r.msg)


def cmd_scale(stub, args, md):
    r = stub.ScaleWorker(management_pb2.ScaleWorkerRequest(
        model_name=args.model_name, model_version=args.model_version or "",
        min_worker=args.min_worker, max_worker=args.max_worker or 0,
        synchronous=args.sync), metadata=md)
    print(r.msg)


def cmd_list(stub, args, md):
    r = stub.ListModels(management_pb2.ListModelsRequest(
        limit=args.limit, next_page_token=args.next_page_token), metadata=md)
    print(r.msg, end="" if r.msg.endswith("\n") else "\n")


def cmd_describe(stub, args, md):
    r = stub.DescribeModel(management_pb2.DescribeModelRequest(
        model_name=args.model_name, model_version=args.model_version or "",
        customized=args.customized), metadata=md)
    print(r.msg, end="" if r.msg.endswith("\n") else "\n")


def common_options(suppress):
    """The options accepted before and after the command. The command's copy has no defaults
    (argparse.SUPPRESS): its defaults would otherwise overwrite what was given before the
    command (`--port 7075 ping` would ping 7070)."""
    c = argparse.ArgumentParser(add_help=False)

    def d(value):
        return argparse.SUPPRESS if suppress else value
    c.add_argument("--host", default=d("localhost"))
    c.add_argument("--port", type=int, default=d(None),
                   help="7070 for inference commands, 7071 for management ones")
    c.add_argument("--token", "--auth-token", dest="token", default=d(None),
                   help="key sent as `authorization: Bearer KEY`")
    c.add_argument("--timeout", type=float, default=d(None), help="call deadline in seconds")
    return c


def parse_args(argv):
    p = argparse.ArgumentParser(description="torchserve-c gRPC client",
                                parents=[common_options(False)])
    common = common_options(True)
    sub = p.add_subparsers(dest="action", required=True)

    sp = sub.add_parser("ping", parents=[common])
    sp.set_defaults(fn=cmd_ping)
    for name, fn in (("infer", cmd_infer), ("infer_stream", cmd_infer_stream)):
        sp = sub.add_parser(name, parents=[common])
        sp.add_argument("model_name")
        sp.add_argument("model_input", help="file with the input ('-' = stdin)")
        sp.add_argument("--model-version", default=None)
        sp.add_argument("--input-name", default="data")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("infer_stream2", parents=[common])
    sp.add_argument("model_name")
    sp.add_argument("sequence_id")
    sp.add_argument("input_files", help="comma-separated input files, one request each")
    sp.add_argument("--model-version", default=None)
    sp.add_argument("--input-name", default="data")
    sp.set_defaults(fn=cmd_infer_stream2)
    sp = sub.add_parser("register", parents=[common])
    sp.add_argument("model_name")
    sp.add_argument("mar_set", nargs="?", default=None,
                    help="comma-separated [model_name=]archive entries (default MODEL.mar)")
    sp.add_argument("--initial-workers", type=int, default=1)
    sp.add_argument("--no-sync", action="store_true", help="do not wait for the workers")
    sp.set_defaults(fn=cmd_register)
    sp = sub.add_parser("unregister", parents=[common])
    sp.add_argument("model_name")
    sp.add_argument("model_version", nargs="?", default=None)
    sp.set_defaults(fn=cmd_unregister)
    sp = sub.add_parser("scale", parents=[common])
    sp.add_argument("model_name")
    sp.add_argument("model_version", nargs="?", default=None)
    sp.add_argument("--min-worker", type=int, default=1)
    sp.add_argument("--max-worker", type=int, default=None)
    sp.add_argument("--sync", action="store_true", help="answer once the workers are up")
    sp.set_defaults(fn=cmd_scale)
    sp = sub.add_parser("list", parents=[common])
    sp.add_argument("--limit", type=int, default=100)
    sp.add_argument("--next-page-token", type=int, default=0)
    sp.set_defaults(fn=cmd_list)
    sp = sub.add_parser("describe", parents=[common])
    sp.add_argument("model_name")
    sp.add_argument("model_version", nargs="?", default=None)
    sp.add_argument("--customized", action="store_true")
    sp.set_defaults(fn=cmd_describe)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    inference = args.action in INFERENCE_COMMANDS
    port = args.port or (7070 if inference else 7071)
    channel = grpc.insecure_channel(f"{args.host}:{port}")
    if inference:
        stub = inference_pb2_grpc.InferenceAPIsServiceStub(channel)
    else:
        stub = management_pb2_grpc.ManagementAPIsServiceStub(channel)
    md = (("authorization", f"Bearer {args.token}"),) if args.token else ()
    if args.timeout:
        # every rpc of the stub gets the deadline
        for attr in dir(stub):
            call = getattr(stub, attr)
            if callable(call) and not attr.startswith("_"):
                setattr(stub, attr, _with_timeout(call, args.timeout))
    try:
        return args.fn(stub, args, md) or 0
    except grpc.RpcError as e:
        print(f"{e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    except OSError as e:  # an input file that cannot be read (infer* take file paths, or -)
        print(f"torchserve_c_client: cannot read {e.filename!r}: {e.strerror}", file=sys.stderr)
        return 2
    finally:
        channel.close()


def _with_timeout(call, timeout):
    def wrapped(*a, **kw):
        kw.setdefault("timeout", timeout)
        return call(*a, **kw)
    return wrapped


if __name__ == "__main__":
    sys.exit(main())
