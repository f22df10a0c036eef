"""Data types and reduction operations: hm_dtype_t and hm_op_t, and how numpy arrays map to them.

numpy has no bfloat16: pass the bits in a uint16 array with ``dtype="bfloat16"`` (an array whose
dtype is named ``bfloat16``, e.g. from the ml_dtypes package, is recognised by itself).
"""

import enum
import operator

import numpy as np


class Dtype(enum.IntEnum):
    """hm_dtype_t."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    BFLOAT16 = 7
    FLOAT32 = 8
    FLOAT64 = 9


class Op(enum.IntEnum):
    """hm_op_t. Integer SUM/PROD wrap around; integer AVG truncates toward zero; float16 and
    bfloat16 reduce in float32."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


_NUMPY_TO_DTYPE = {
    np.dtype(np.int8): Dtype.INT8,
    np.dtype(np.uint8): Dtype.UINT8,
    np.dtype(np.int32): Dtype.INT32,
    np.dtype(np.uint32): Dtype.UINT32,
    np.dtype(np.int64): Dtype.INT64,
    np.dtype(np.uint64): Dtype.UINT64,
    np.dtype(np.float16): Dtype.FLOAT16,
    np.dtype(np.float32): Dtype.FLOAT32,
    np.dtype(np.float64): Dtype.FLOAT64,
}

SUPPORTED_NUMPY_DTYPES = tuple(str(d) for d in _NUMPY_TO_DTYPE)


def dtype_of(name, array, requested=None):
    """The hm_dtype_t of `array`; `requested` (a Dtype or its name, e.g. "bfloat16") says how to
    read its bytes and must agree with the array's numpy dtype. Raises TypeError otherwise."""
    if requested is not None:
        wanted = _parse_dtype(requested)
        if wanted == Dtype.BFLOAT16:
            if array.dtype != np.dtype(np.uint16) and array.dtype.name != "bfloat16":
                raise TypeError(f"{name} has dtype {array.dtype}: dtype='bfloat16' needs a uint16 "
                                "array holding the bfloat16 bits")
            return wanted
        if _NUMPY_TO_DTYPE.get(array.dtype) != wanted:
            raise TypeError(f"{name} has dtype {array.dtype} but dtype={wanted.name.lower()!r} "
                            "was asked for")
        return wanted
    if array.dtype.name == "bfloat16":
        return Dtype.BFLOAT16
    found = _NUMPY_TO_DTYPE.get(array.dtype)
    if found is None:
        hint = ""
        if array.dtype == np.dtype(np.uint16):
            hint = " (for bfloat16 bits pass dtype='bfloat16')"
        elif array.dtype.byteorder not in ("=", "|") and array.dtype.newbyteorder("=") in \
                _NUMPY_TO_DTYPE:
            hint = " (not in native byte order: use array.astype(array.dtype.newbyteorder('=')))"
        raise TypeError(f"{name} has dtype {array.dtype}, which Holmes does not reduce; supported: "
                        f"{', '.join(SUPPORTED_NUMPY_DTYPES)} and bfloat16{hint}")
    return found


def _parse_dtype(requested):
    if isinstance(requested, Dtype):
        return requested
    if isinstance(requested, str):
        try:
            return Dtype[requested.upper()]
        except KeyError:
            pass
    try:
        return _NUMPY_TO_DTYPE[np.dtype(requested)]
    except (TypeError, KeyError):
        raise TypeError(f"dtype {requested!r} is not a Holmes dtype; expected one of "
                        f"{', '.join(d.name.lower() for d in Dtype)}") from None


def op_of(op):
    """An Op from an Op or its name ("sum", "prod", "min", "max", "avg"); ValueError otherwise."""
    if isinstance(op, Op):
        return op
    if isinstance(op, str):
        try:
            return Op[op.upper()]
        except KeyError:
            pass
    elif isinstance(op, int) and not isinstance(op, bool):
        try:
            return Op(op)
        except ValueError:
            pass
    raise ValueError(f"op {op!r} is not a reduction; expected one of "
                     f"{', '.join(repr(o.name.lower()) for o in Op)}")


def rank_of(name, value, size):
    """A rank argument (root, peer) checked to lie in [0, size)."""
    try:
        index = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if isinstance(value, bool) or not 0 <= index < size:
        raise ValueError(f"{name} is {value!r}: expected a rank in [0, {size})")
    return index
