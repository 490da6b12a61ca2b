"""Client for the cordon daemon's HTTP API (standard library only).

    client = Client("http://127.0.0.1:7419", token_file="/var/lib/cordon/token")
    client.run(argv=["/bin/echo", "hi"])
    with client.session("work") as s:
        s.exec("echo hi")
"""
from .client import Client, Session
from .errors import (
    AboveCeilingError,
    AuthError,
    ConflictError,
    CordonError,
    ForbiddenError,
    IntegrityError,
    NotFoundError,
    OverCapacityError,
    QuarantinedError,
    ServerError,
    TooLargeError,
    ValidationError,
)

__all__ = [
    "Client",
    "Session",
    "CordonError",
    "AuthError",
    "ValidationError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "QuarantinedError",
    "TooLargeError",
    "AboveCeilingError",
    "IntegrityError",
    "OverCapacityError",
    "ServerError",
]
