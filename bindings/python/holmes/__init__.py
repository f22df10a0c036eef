"""Holmes from Python: communicators, collectives on numpy arrays, and the planner.

    import numpy as np
    import holmes

    with holmes.init() as world:              # from holmes-run's (or torchrun's ...) variables
        grad = np.ones(1024, dtype=np.float32)
        world.allreduce(grad, "avg", out=grad)  # in place
        req = world.iallgather(grad[:4])      # nonblocking: req.wait() returns the result

A thin layer over the C API (include/holmes/holmes.h) through ctypes; nothing to compile. The
library is found through HOLMES_LIBRARY, a build tree of this checkout, or the system (see
holmes._lib). Errors from the library raise HolmesError subclasses with .status, .status_name and
.message; bad arguments raise TypeError/ValueError before anything is sent.
"""

import ctypes

from . import _lib
from ._lib import HM_COLOR_UNDEFINED, LibraryNotFoundError, library_path
from .comm import Comm, Request, init, join
from .errors import (AbortedError, AuthError, HolmesError, InternalError, InvalidArgumentError,
                     MismatchError, OutOfMemoryError, PeerFailedError, Status, TimedOutError,
                     TransportError, UnsupportedError, status_name)
from .plan import LayerSource, Plan, RankInfo
from .types import Dtype, Op

SUM, PROD, MIN, MAX, AVG = Op.SUM, Op.PROD, Op.MIN, Op.MAX, Op.AVG

__version__ = "0.1.0"

__all__ = [
    "init", "join", "Comm", "Request", "Plan", "RankInfo", "LayerSource", "Dtype", "Op", "Status",
    "SUM", "PROD", "MIN", "MAX", "AVG", "HolmesError", "InvalidArgumentError", "MismatchError",
    "TimedOutError", "PeerFailedError", "AuthError", "TransportError", "UnsupportedError",
    "OutOfMemoryError", "AbortedError", "InternalError", "LibraryNotFoundError", "status_name",
    "library_path", "library_version", "HM_COLOR_UNDEFINED",
]


def library_version():
    """The loaded library's HOLMES_VERSION_CODE (major * 10000 + minor * 100 + patch)."""
    from .errors import check  # pylint: disable=import-outside-toplevel
    version = ctypes.c_int()
    check(_lib.lib().hm_get_version(ctypes.byref(version)))
    return version.value
