"""Errors the control plane returns to users: each names the object and the reason."""

from __future__ import annotations


class ApiError(Exception):
    """A refusal with an HTTP status; ``obj`` names what was refused ("network default:net1")."""

    status = 400

    def __init__(self, obj: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{obj}: {reason}" if obj else reason)
        self.obj = obj
        self.reason = reason
        if status is not None:
            self.status = status

    def __reduce__(self) -> tuple[type, tuple[str, str, int]]:
        # Errors cross process boundaries (worker pools); keep all three fields.
        return (type(self), (self.obj, self.reason, self.status))

    def to_json(self) -> dict[str, str]:
        return {"error": str(self), "object": self.obj, "reason": self.reason}


class BadRequest(ApiError):
    status = 400


class NotFound(ApiError):
    status = 404

    def __init__(self, obj: str, reason: str = "not found", status: int | None = None) -> None:
        super().__init__(obj, reason, status)


class Conflict(ApiError):
    """The request is valid but the current state refuses it (guards, duplicates, exhaustion)."""

    status = 409


class Unavailable(ApiError):
    status = 503
