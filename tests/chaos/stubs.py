"""Python stubs of pdserve's protos, generated at run time.

The same approach as tests/e2e/python_client.py (protoc + grpc_python_plugin
from Debian's protobuf-compiler-grpc, imported under /usr/bin/python3 with
Debian's python3-grpcio), for the public API and the internal worker API
(PrefillWorker/DecodeWorker GetLoad).

  from stubs import load_stubs
  s = load_stubs(proto_dir, out_dir)
  s.grpc, s.pb2 (pdserve.v1.generate), s.pb2_grpc, s.worker_pb2, s.worker_pb2_grpc
"""

import os
import shutil
import subprocess
import sys
import types

DEBIAN_PYTHON = "/usr/bin/python3"
PROTOS = ("pdserve/v1/generate.proto", "pdserve/internal/v1/worker.proto")


class StubError(Exception):
    pass


def reexec_under_debian_python(script):
    """Re-executes `script` with /usr/bin/python3 when grpc is not importable here."""
    try:
        import grpc  # noqa: F401
        import google.protobuf  # noqa: F401
        return
    except ImportError as e:
        if os.path.realpath(sys.executable) != os.path.realpath(DEBIAN_PYTHON) and os.path.exists(DEBIAN_PYTHON):
            os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON, os.path.abspath(script)] + sys.argv[1:])
        raise StubError(f"{e}; install Debian's python3-grpcio and python3-protobuf and run with {DEBIAN_PYTHON}")


def find_plugin():
    found = shutil.which("grpc_python_plugin") or (
        "/usr/bin/grpc_python_plugin" if os.path.exists("/usr/bin/grpc_python_plugin") else None)
    if not found:
        raise StubError("grpc_python_plugin not found; install protobuf-compiler-grpc")
    return found


def load_stubs(proto_dir, out_dir, protoc="protoc"):
    import grpc
    for p in PROTOS:
        if not os.path.isfile(os.path.join(proto_dir, p)):
            raise StubError(f"{os.path.join(proto_dir, p)} does not exist")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [protoc, f"--proto_path={proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
           f"--plugin=protoc-gen-grpc_python={find_plugin()}", *PROTOS]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        raise StubError(f"{protoc} not found; install protobuf-compiler")
    if r.returncode != 0:
        raise StubError(f"protoc failed ({' '.join(cmd)}): {r.stderr.strip()}")
    sys.path.insert(0, out_dir)  # pdserve/... are namespace packages
    from pdserve.v1 import generate_pb2, generate_pb2_grpc
    from pdserve.internal.v1 import worker_pb2, worker_pb2_grpc
    return types.SimpleNamespace(grpc=grpc, pb2=generate_pb2, pb2_grpc=generate_pb2_grpc, worker_pb2=worker_pb2,
                                 worker_pb2_grpc=worker_pb2_grpc)
