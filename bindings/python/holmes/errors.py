"""Statuses of the C API and the exceptions they become.

Every C call that does not return HM_SUCCESS raises a HolmesError subclass chosen by the status,
carrying ``.status`` (a :class:`Status`, an int), ``.status_name`` (``hm_status_string``, e.g.
``"HM_ERR_TIMEOUT"``) and ``.message`` (``hm_last_error_message``: the call, the peer, what was
expected). Mistakes Python can see before calling C (a wrong dtype, a short output array, a root
out of range) raise TypeError or ValueError instead, and nothing is sent.
"""

import enum

from . import _lib


class Status(enum.IntEnum):
    """hm_status_t."""

    SUCCESS = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_MISMATCH = 2
    ERR_TIMEOUT = 3
    ERR_PEER_FAILED = 4
    ERR_AUTH = 5
    ERR_TRANSPORT = 6
    ERR_UNSUPPORTED = 7
    ERR_OUT_OF_MEMORY = 8
    ERR_ABORTED = 9
    ERR_INTERNAL = 10


class HolmesError(RuntimeError):
    """A Holmes call failed. ``status``: the hm_status_t; ``status_name``: its constant's name;
    ``message``: the library's detail for the failing call."""

    def __init__(self, status, message):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = int(status)
        self.status_name = status_name(status)
        self.message = message
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class InvalidArgumentError(HolmesError):
    """HM_ERR_INVALID_ARGUMENT."""


class MismatchError(HolmesError):
    """HM_ERR_MISMATCH: ranks disagree on count, dtype, op, root or link."""


class TimedOutError(HolmesError, TimeoutError):
    """HM_ERR_TIMEOUT: a blocking wait ran past the communicator's timeout (also a built-in
    TimeoutError)."""


class PeerFailedError(HolmesError):
    """HM_ERR_PEER_FAILED: a peer's process or link went away."""


class AuthError(HolmesError):
    """HM_ERR_AUTH: the job token was not proven."""


class TransportError(HolmesError):
    """HM_ERR_TRANSPORT."""


class UnsupportedError(HolmesError):
    """HM_ERR_UNSUPPORTED: this build or machine cannot do it."""


class OutOfMemoryError(HolmesError, MemoryError):
    """HM_ERR_OUT_OF_MEMORY."""


class AbortedError(HolmesError):
    """HM_ERR_ABORTED: the communicator was aborted or destroyed."""


class InternalError(HolmesError):
    """HM_ERR_INTERNAL."""


_BY_STATUS = {
    Status.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    Status.ERR_MISMATCH: MismatchError,
    Status.ERR_TIMEOUT: TimedOutError,
    Status.ERR_PEER_FAILED: PeerFailedError,
    Status.ERR_AUTH: AuthError,
    Status.ERR_TRANSPORT: TransportError,
    Status.ERR_UNSUPPORTED: UnsupportedError,
    Status.ERR_OUT_OF_MEMORY: OutOfMemoryError,
    Status.ERR_ABORTED: AbortedError,
    Status.ERR_INTERNAL: InternalError,
}


def status_name(status):
    """hm_status_string: "HM_ERR_TIMEOUT", or "HM_ERR_UNKNOWN_STATUS" for a bad value."""
    return _lib.lib().hm_status_string(int(status)).decode()


def error_for(status, message=None):
    """The exception for a failed call; message defaults to hm_last_error_message()."""
    if message is None:
        message = _lib.lib().hm_last_error_message().decode(errors="replace")
    return _BY_STATUS.get(status, HolmesError)(status, message)


def check(status):
    """Raises the matching HolmesError unless status is HM_SUCCESS."""
    if status != 0:
        raise error_for(status)
