#!/usr/bin/python3
"""An outside client of pdserve's public API, in Python.

Generates the Python stubs of proto/pdserve/v1/generate.proto at run time
(protoc + grpc_python_plugin from Debian's protobuf-compiler-grpc), calls
pdserve.v1.Generator/Generate, concatenates the streamed token ids and prints
them as {"token_ids": [...]} on stdout, the same format as pdserve-generate.
The finish reason, request id (the response's, and the router's
x-request-id initial and trailing metadata) and usage go to stderr on one
line.

Needs Debian's python3-grpcio and python3-protobuf, which live under
/usr/bin/python3 (not a pyenv python); run under another interpreter, the
script re-executes itself with /usr/bin/python3.

  python_client.py --router 127.0.0.1:50051 --prompt-ids 1,2,3 --max-new-tokens 16 \
      [--temperature T --top-p P --top-k K --seed S] [--stop SEQ]... [--ignore-eos]
      [--request-id ID] [--traceparent 00-<trace id>-<parent id>-01]

Exit codes: 0 on success; 1 on an RPC error, printed as
"python_client.py: error: CODE_NAME: message"; 2 on bad arguments or when
the stubs cannot be generated or imported.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

PROG = os.path.basename(sys.argv[0])
DEBIAN_PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO_DIR = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO = "pdserve/v1/generate.proto"


def die(message, code=2):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(code)


def import_grpc():
    """Imports grpc, re-executing under Debian's python3 when it is missing."""
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
    except ImportError as e:
        if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
            os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(__file__)] + sys.argv[1:])
        die(f"{e}; install Debian's python3-grpcio and python3-protobuf (scripts/setup.sh) "
            f"and run with {DEBIAN_PYTHON}")
    import grpc
    return grpc


def find_plugin(explicit):
    if explicit:
        return explicit
    found = shutil.which("grpc_python_plugin")
    if found:
        return found
    if os.path.exists("/usr/bin/grpc_python_plugin"):
        return "/usr/bin/grpc_python_plugin"
    die("grpc_python_plugin not found; install protobuf-compiler-grpc or pass --grpc-python-plugin")


def generate_stubs(proto_dir, out_dir, protoc, plugin):
    """Runs protoc for the public proto into out_dir and imports the modules."""
    if not os.path.isfile(os.path.join(proto_dir, PROTO)):
        die(f"{os.path.join(proto_dir, PROTO)} does not exist (pass --proto-dir)")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [protoc, f"--proto_path={proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
           f"--plugin=protoc-gen-grpc_python={plugin}", PROTO]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        die(f"{protoc} not found; install protobuf-compiler or pass --protoc")
    if r.returncode != 0:
        die(f"protoc failed ({' '.join(cmd)}): {r.stderr.strip()}")
    # pdserve/ and pdserve/v1/ have no __init__.py: namespace packages.
    sys.path.insert(0, out_dir)
    try:
        from pdserve.v1 import generate_pb2, generate_pb2_grpc
    except Exception as e:  # a protoc/python-protobuf mismatch shows up here
        die(f"cannot import the generated stubs from {out_dir}: {type(e).__name__}: {e}")
    return generate_pb2, generate_pb2_grpc


def parse_ids(text):
    ids = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) >= 2**32:
            die(f"--prompt-ids: '{item}' is not a token id (a non-negative 32-bit integer)")
        ids.append(int(item))
    if not ids:
        die("--prompt-ids needs at least one id")
    return ids


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, like the C++ tools (argparse prints the whole usage)
        die(message)


def main():
    ap = _Parser(prog=PROG, description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--router", default="127.0.0.1:50051", help="router address, host:port")
    prompt = ap.add_mutually_exclusive_group()
    prompt.add_argument("--prompt-ids", help="prompt token ids, comma-separated: 1,2,3")
    prompt.add_argument("--text", help="prompt as text (the router tokenizes it)")
    ap.add_argument("--max-new-tokens", type=int, default=16, help="tokens to generate (>= 1)")
    ap.add_argument("--temperature", type=float, default=0.0, help="<= 0 is greedy")
    ap.add_argument("--top-p", type=float, default=0.0, help="in (0, 1]; 0 means 1")
    ap.add_argument("--top-k", type=int, default=0, help="0 keeps all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stop", action="append", default=[], help="a stop sequence; repeat for more")
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--request-id", default="", help="optional; the router assigns one when empty")
    ap.add_argument("--traceparent", default="", help="W3C trace context, sent as `traceparent` metadata")
    ap.add_argument("--deadline-ms", type=int, default=0, help="deadline of the call; 0 = none")
    ap.add_argument("--proto-dir", default=DEFAULT_PROTO_DIR,
                    help="root of the .proto files (default: the repository's proto/)")
    ap.add_argument("--out-dir", default=None,
                    help="where to generate the stubs (default: a temporary directory, removed at exit)")
    ap.add_argument("--protoc", default="protoc")
    ap.add_argument("--grpc-python-plugin", default=None, help="default: grpc_python_plugin on PATH")
    ap.add_argument("--check-stubs", action="store_true",
                    help="only generate and import the stubs, print their versions, and exit")
    args = ap.parse_args()

    grpc = import_grpc()
    plugin = find_plugin(args.grpc_python_plugin)
    tmp = None
    out_dir = args.out_dir
    if out_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="pdserve-pystubs-")
        out_dir = tmp.name
    try:
        pb2, pb2_grpc = generate_stubs(args.proto_dir, out_dir, args.protoc, plugin)
        if args.check_stubs:
            import google.protobuf
            print(json.dumps({"grpcio": grpc.__version__, "protobuf": google.protobuf.__version__,
                              "services": list(pb2.DESCRIPTOR.services_by_name)}, separators=(",", ":")))
            return 0
        return generate(grpc, pb2, pb2_grpc, args)
    finally:
        if tmp is not None:
            tmp.cleanup()


def generate(grpc, pb2, pb2_grpc, args):
    if args.prompt_ids is None and args.text is None:
        die("give exactly one of --prompt-ids 1,2,3 and --text TEXT")
    if args.max_new_tokens < 1:
        die("--max-new-tokens must be >= 1")
    if args.top_k < 0 or args.seed < 0 or args.deadline_ms < 0:
        die("--top-k, --seed and --deadline-ms must be >= 0")
    req = pb2.GenerateRequest(
        request_id=args.request_id,
        sampling=pb2.SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                                    top_p=args.top_p, top_k=args.top_k, seed=args.seed, stop=args.stop,
                                    ignore_eos=args.ignore_eos))
    if args.text is not None:
        req.text = args.text
    else:
        req.token_ids.extend(parse_ids(args.prompt_ids))

    token_ids = []
    last = None
    metadata = [("traceparent", args.traceparent)] if args.traceparent else None
    with grpc.insecure_channel(args.router) as channel:
        stub = pb2_grpc.GeneratorStub(channel)
        timeout = args.deadline_ms / 1000.0 if args.deadline_ms > 0 else None
        call = stub.Generate(req, timeout=timeout, metadata=metadata)
        try:
            for resp in call:
                token_ids.extend(resp.token_ids)
                last = resp
        except grpc.RpcError as e:
            die(f"{e.code().name}: {e.details()}", code=1)
        header_id = dict(call.initial_metadata() or ()).get("x-request-id", "")
        trailer_id = dict(call.trailing_metadata() or ()).get("x-request-id", "")

    print(json.dumps({"token_ids": token_ids}, separators=(",", ":")), flush=True)
    if last is None or last.finish_reason == pb2.FINISH_REASON_UNSPECIFIED:
        print(f"{PROG}: warning: the stream ended without a finish reason", file=sys.stderr)
    finish = pb2.FinishReason.Name(last.finish_reason) if last is not None else "FINISH_REASON_UNSPECIFIED"
    usage = {}
    if last is not None and last.HasField("usage"):
        usage = {f.name: getattr(last.usage, f.name) for f in last.usage.DESCRIPTOR.fields}
    print(f"finish_reason={finish.removeprefix('FINISH_REASON_').lower()} "
          f"request_id={last.request_id if last is not None else ''} x_request_id={header_id} "
          f"x_request_id_trailer={trailer_id} usage={json.dumps(usage, separators=(',', ':'))}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
