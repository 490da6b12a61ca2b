"""Typed errors: one class per kind of failure the API reports."""
from typing import Any, Dict, Optional


class CordonError(Exception):
    """An error answer of the daemon: its status, code, message and field."""

    def __init__(self, status: int, code: str, message: str,
                 field: Optional[str] = None, body: Optional[Dict[str, Any]] = None):
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.body = body or {}


class ValidationError(CordonError):
    """400: a field is invalid (``.field`` names it) or a capability was refused."""


class AuthError(CordonError):
    """401: the token is missing or wrong."""


class ForbiddenError(CordonError):
    """403: a path leads outside the session's workspace."""


class NotFoundError(CordonError):
    """404: no such session, file or endpoint."""


class ConflictError(CordonError):
    """409: the session's state does not allow it (invalidated, lost, ...)."""


class QuarantinedError(ConflictError):
    """409: the session's teardown could not be verified; ``.survivors`` are pids."""

    @property
    def survivors(self):
        return self.body.get("error", {}).get("survivors", [])


class TooLargeError(CordonError):
    """413 (or 431): a body, file or header over the daemon's limit."""


class IntegrityError(CordonError):
    """422: a digest did not match (or a download did not match its digest)."""


class AboveCeilingError(CordonError):
    """422: a limit above the daemon's ceiling (``.field`` names it; the
    message names the ceiling and the option that sets it)."""


class OverCapacityError(CordonError):
    """429: too many sessions or runs; retry after ``.retry_after`` seconds."""

    def __init__(self, *args, retry_after: Optional[float] = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.retry_after = retry_after


class ServerError(CordonError):
    """5xx: cordon's own fault."""


_BY_STATUS = {
    400: ValidationError,
    401: AuthError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ConflictError,
    413: TooLargeError,
    431: TooLargeError,
    422: IntegrityError,
}


def from_response(status: int, body: Dict[str, Any], retry_after: Optional[str]) -> CordonError:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    code = error.get("code", "error")
    message = error.get("message", f"HTTP {status}")
    field = error.get("field")
    if status == 429:
        after = float(retry_after) if retry_after else None
        return OverCapacityError(status, code, message, field, body, retry_after=after)
    if status == 422 and code == "above_ceiling":
        return AboveCeilingError(status, code, message, field, body)
    if status == 409 and code == "quarantined":
        return QuarantinedError(status, code, message, field, body)
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else CordonError)
    return cls(status, code, message, field, body)
