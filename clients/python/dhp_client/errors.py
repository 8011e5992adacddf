"""The controller's gRPC status codes as Python exceptions.

Every call of :class:`dhp_client.Client` raises a subclass of :class:`DhpError` when the
controller answers with an error; the message is the controller's own, naming the field or the
state at fault ("spec.vision.degree: 3 does not divide ...", "job j-1 not found").
"""

from __future__ import annotations

import grpc


class DhpError(Exception):
    """An error answer from the controller: ``code`` (a grpc.StatusCode) and ``message``."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(self, message: str, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return "%s: %s" % (self.code.name, self.message)


class InvalidArgument(DhpError):
    """A bad spec or argument (gRPC INVALID_ARGUMENT, HTTP 400)."""
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(DhpError):
    """No such job, node or checkpoint (NOT_FOUND)."""
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(DhpError):
    """The thing to create exists already (ALREADY_EXISTS)."""
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(DhpError):
    """Not possible in the job's state, or the job can never fit the cluster."""
    code = grpc.StatusCode.FAILED_PRECONDITION


class Unauthenticated(DhpError):
    """No token, or a wrong one."""
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(DhpError):
    """The token is valid but may not do this (PERMISSION_DENIED)."""
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(DhpError):
    """A limit of the controller was reached: request size, queue length (RESOURCE_EXHAUSTED)."""
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExceeded(DhpError):
    """The call, or Client.wait, ran past its timeout (DEADLINE_EXCEEDED)."""
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unavailable(DhpError):
    """The controller cannot be reached, or is shutting down."""
    code = grpc.StatusCode.UNAVAILABLE


_BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, Unauthenticated,
    PermissionDenied, ResourceExhausted, DeadlineExceeded, Unavailable)}


def from_rpc_error(error: grpc.RpcError) -> DhpError:
    """The DhpError subclass for a failed gRPC call."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    cls = _BY_CODE.get(code, DhpError)
    return cls(details or "", code)
