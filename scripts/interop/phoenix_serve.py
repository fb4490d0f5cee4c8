"""Arize Phoenix as the interop run's OTLP receiver, on 127.0.0.1 only (scripts/interop/tracing.sh).

`phoenix serve` listens for OTLP over HTTP on PHOENIX_HOST, but binds its gRPC receiver on every
interface (`[::]`, phoenix/server/grpc_server.py), whatever PHOENIX_HOST says. The run listens on
loopback alone: this binds that port to 127.0.0.1 instead, then runs `phoenix serve` as its own
script does.
"""

from __future__ import annotations

import sys

import grpc.aio

_server = grpc.aio.server


def _loopback_server(*args, **kwargs):
    server = _server(*args, **kwargs)
    add = server.add_insecure_port
    server.add_insecure_port = lambda address: add(address.replace("[::]", "127.0.0.1"))
    return server


grpc.aio.server = _loopback_server

from phoenix.server.main import main  # noqa: E402 (after the patch above)

sys.argv = ["phoenix", "serve"]
sys.exit(main())
