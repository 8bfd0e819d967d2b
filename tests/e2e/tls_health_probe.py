"""grpc.health.v1 Check over TLS, without generated code: prints SERVING (or
the status name) and exits 0, or prints the RPC error code and exits 1.
Usage: tls_health_probe.py ADDRESS CA [CERT KEY]   (CERT/KEY: a client certificate)
"""
import sys

import grpc

STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}


def main():
    address, ca = sys.argv[1], sys.argv[2]
    read = lambda p: open(p, "rb").read()
    cert = read(sys.argv[3]) if len(sys.argv) > 4 else None
    key = read(sys.argv[4]) if len(sys.argv) > 4 else None
    creds = grpc.ssl_channel_credentials(root_certificates=read(ca), private_key=key, certificate_chain=cert)
    with grpc.secure_channel(address, creds) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            reply = check(b"", timeout=5)  # HealthCheckRequest{} is empty
        except grpc.RpcError as e:
            print(e.code().name)
            return 1
    # HealthCheckResponse{status = 1}: field 1, varint -> 0x08 N (absent = 0)
    print(STATUS.get(reply[1] if len(reply) >= 2 and reply[0] == 0x08 else 0, "?"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
