"""Finding libholmes and declaring the C API (include/holmes/holmes.h) to ctypes.

The library is searched, first match wins:

1. ``HOLMES_LIBRARY``: a path to ``libholmes.so`` (the ctest registration passes
   ``HOLMES_LIBRARY=$<TARGET_FILE:holmes>``). When set, nothing else is tried.
2. A build tree of the checkout the package sits in: ``<repo>/build*/lib/libholmes.so`` (the
   newest one), so ``PYTHONPATH=bindings/python`` works after ``cmake -B build && ninja -C build``.
3. An installed library: ``<prefix>/lib/libholmes.so`` for a package installed under
   ``<prefix>/lib/python3*/...``, then the dynamic linker's search (``LD_LIBRARY_PATH``,
   ``ldconfig``) through ``ctypes.util.find_library("holmes")``.

Every function the package calls has its argtypes and restype declared here, so a wrong call
fails in Python instead of corrupting the stack.
"""

import ctypes
import ctypes.util
import functools
import os
import pathlib

# The header's version this module mirrors (HOLMES_VERSION_CODE): hm_config_t.version.
HEADER_VERSION_CODE = 100

HM_COLOR_UNDEFINED = -1
HM_SHRINK_DEFAULT = 0
HM_SHRINK_FAILED = 1


class LibraryNotFoundError(OSError):
    """libholmes.so could not be found or loaded; the message lists where it was looked for."""


# --- structs, field for field as in holmes.h --------------------------------------------------


class Config(ctypes.Structure):
    """hm_config_t."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("version", ctypes.c_uint),
        ("rank", ctypes.c_int),
        ("world_size", ctypes.c_int),
        ("store", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("topology", ctypes.c_char_p),
        ("serve_store", ctypes.c_int),
        ("timeout_ms", ctypes.c_int),
        ("sockets_per_peer", ctypes.c_int),
        ("local_addr", ctypes.c_char_p),
        ("kv_store", ctypes.c_void_p),  # const hm_kv_store_t*; the package passes NULL
    ]

    @classmethod
    def initializer(cls):
        """HM_CONFIG_INITIALIZER."""
        return cls(ctypes.sizeof(cls), HEADER_VERSION_CODE, -1, -1, None, None, None, -1, 0, 0,
                   None, None)


class Model(ctypes.Structure):
    """hm_model_t."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("preset", ctypes.c_char_p),
        ("file", ctypes.c_char_p),
        ("layers", ctypes.c_int),
        ("hidden", ctypes.c_int),
        ("heads", ctypes.c_int),
        ("seq_len", ctypes.c_int),
        ("vocab", ctypes.c_int),
        ("micro_batch", ctypes.c_int),
        ("global_batch", ctypes.c_int),
        ("dtype_bytes", ctypes.c_int),
        ("recompute", ctypes.c_int),
        ("tp", ctypes.c_int),
        ("pp", ctypes.c_int),
        ("gpu_memory_gb", ctypes.c_double),
        ("architecture", ctypes.c_char_p),  # a later field: older libraries ignore it (size)
        ("device_tflops", ctypes.c_double),
    ]

    @classmethod
    def initializer(cls):
        """HM_MODEL_INITIALIZER."""
        return cls(ctypes.sizeof(cls), None, None, 0, 0, 0, 0, 0, 0, 0, 0, -1, 0, 0, 0.0, None, 0.0)


class PlanRank(ctypes.Structure):
    """hm_plan_rank_t."""

    _fields_ = [
        ("stage", ctypes.c_int),
        ("num_stages", ctypes.c_int),
        ("first_layer", ctypes.c_int),
        ("num_layers", ctypes.c_int),
        ("tp_rank", ctypes.c_int),
        ("tp_size", ctypes.c_int),
        ("dp_rank", ctypes.c_int),
        ("dp_size", ctypes.c_int),
        ("micro_batches", ctypes.c_int),
    ]


class LayerSource(ctypes.Structure):
    """hm_layer_source_t."""

    _fields_ = [
        ("first_layer", ctypes.c_int),
        ("num_layers", ctypes.c_int),
        ("rank", ctypes.c_int),
    ]


# --- prototypes ------------------------------------------------------------------------------

_status = ctypes.c_int  # hm_status_t (and every other enum: C enums are int-sized here)
_enum = ctypes.c_int
_comm = ctypes.c_void_p  # hm_comm_t
_request = ctypes.c_void_p  # hm_request_t
_plan = ctypes.c_void_p  # hm_plan_t
_ptr = ctypes.c_void_p
_size = ctypes.c_size_t
_int = ctypes.c_int
_P = ctypes.POINTER

_PROTOTYPES = {
    "hm_status_string": (ctypes.c_char_p, [_status]),
    "hm_last_error_message": (ctypes.c_char_p, []),
    "hm_get_version": (_status, [_P(_int)]),
    "hm_dtype_size": (_status, [_enum, _P(_size)]),
    "hm_init_from_env": (_status, [_P(_comm)]),
    "hm_init": (_status, [_P(Config), _P(_comm)]),
    "hm_comm_rank": (_status, [_comm, _P(_int)]),
    "hm_comm_size": (_status, [_comm, _P(_int)]),
    "hm_comm_peer_transport": (_status, [_comm, _int, _P(ctypes.c_char_p),
                                         _P(ctypes.c_char_p)]),
    "hm_comm_peer_engine": (_status, [_comm, _int, _P(ctypes.c_char_p), _P(ctypes.c_char_p)]),
    "hm_comm_query_link": (_status, [_comm, _int, _P(ctypes.c_double), _P(ctypes.c_double)]),
    "hm_comm_split": (_status, [_comm, _int, _int, _P(_comm)]),
    "hm_comm_destroy": (_status, [_comm]),
    "hm_comm_abort": (_status, [_comm]),
    "hm_comm_revoke": (_status, [_comm]),
    "hm_comm_grow": (_status, [_comm, _int, _P(_comm)]),
    "hm_comm_join": (_status, [_P(Config), _P(_comm)]),
    "hm_comm_shrink": (_status, [_comm, _P(_int), _int, _int, _P(_comm)]),
    "hm_comm_get_async_error": (_status, [_comm, _P(_status)]),
    "hm_comm_set_cuda_stream": (_status, [_comm, _ptr]),
    "hm_comm_clear_cuda_stream": (_status, [_comm]),
    "hm_allreduce": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum]),
    "hm_reduce_scatter": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum]),
    "hm_allgather": (_status, [_comm, _ptr, _ptr, _size, _enum]),
    "hm_broadcast": (_status, [_comm, _ptr, _size, _enum, _int]),
    "hm_reduce": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum, _int]),
    "hm_alltoall": (_status, [_comm, _ptr, _ptr, _size, _enum]),
    "hm_send": (_status, [_comm, _ptr, _size, _enum, _int]),
    "hm_recv": (_status, [_comm, _ptr, _size, _enum, _int]),
    "hm_barrier": (_status, [_comm]),
    "hm_iallreduce": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum, _P(_request)]),
    "hm_ireduce_scatter": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum, _P(_request)]),
    "hm_iallgather": (_status, [_comm, _ptr, _ptr, _size, _enum, _P(_request)]),
    "hm_ibroadcast": (_status, [_comm, _ptr, _size, _enum, _int, _P(_request)]),
    "hm_ireduce": (_status, [_comm, _ptr, _ptr, _size, _enum, _enum, _int, _P(_request)]),
    "hm_ialltoall": (_status, [_comm, _ptr, _ptr, _size, _enum, _P(_request)]),
    "hm_isend": (_status, [_comm, _ptr, _size, _enum, _int, _P(_request)]),
    "hm_irecv": (_status, [_comm, _ptr, _size, _enum, _int, _P(_request)]),
    "hm_ibarrier": (_status, [_comm, _P(_request)]),
    "hm_wait": (_status, [_P(_request)]),
    "hm_test": (_status, [_P(_request), _P(_int)]),
    "hm_request_free": (_status, [_request]),
    "hm_plan_create": (_status, [_comm, _P(Model), _P(_plan)]),
    "hm_plan_destroy": (_status, [_plan]),
    "hm_plan_get_rank": (_status, [_plan, _P(PlanRank)]),
    "hm_plan_comm_create": (_status, [_plan, _enum, _P(_comm)]),
    "hm_plan_get_json": (_status, [_plan, ctypes.c_char_p, _size, _P(_size)]),
    "hm_plan_get_prediction": (_status, [_plan, _P(ctypes.c_double), _P(ctypes.c_double)]),
}

# Functions newer than the first release: declared when the loaded library has them.
_OPTIONAL_PROTOTYPES = {
    "hm_plan_select_placement": (_status, [_plan, _enum]),
    "hm_plan_replan": (_status, [_plan, _comm, _P(_plan)]),
    "hm_plan_get_layer_sources": (_status, [_plan, _int, _P(LayerSource), _size, _P(_size)]),
}


def _candidates():
    """Paths (or bare names for the dynamic linker) to try, in order."""
    env = os.environ.get("HOLMES_LIBRARY")
    if env:
        return [env]
    found = []
    package_dir = pathlib.Path(__file__).resolve().parent
    # A checkout: bindings/python/holmes -> the repository root, three levels up.
    repo = package_dir.parents[2]
    builds = sorted(repo.glob("build*/lib/libholmes.so"), key=lambda p: p.stat().st_mtime,
                    reverse=True)
    found += [str(p) for p in builds]
    # An install under <prefix>/lib/python3.X/site-packages/holmes: <prefix>/lib/libholmes.so.
    for parent in package_dir.parents:
        if parent.name.startswith("python3"):
            candidate = parent.parent / "libholmes.so"
            if candidate.exists():
                found.append(str(candidate))
            break
    system = ctypes.util.find_library("holmes")
    if system:
        found.append(system)
    found.append("libholmes.so")  # LD_LIBRARY_PATH, which find_library may not read
    return found


def _declare(cdll):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        function = getattr(cdll, name)
        function.restype = restype
        function.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL_PROTOTYPES.items():
        if hasattr(cdll, name):
            function = getattr(cdll, name)
            function.restype = restype
            function.argtypes = argtypes
    return cdll


def has(name):
    """Whether the loaded library exports `name` (for functions newer than the first release)."""
    return hasattr(lib(), name)


@functools.lru_cache(maxsize=None)
def lib():
    """The loaded libholmes with every prototype declared (loaded once per process, then
    immutable)."""
    tried = []
    for candidate in _candidates():
        try:
            cdll = ctypes.CDLL(candidate)
        except OSError as error:
            tried.append(f"{candidate} ({error})")
            continue
        return _declare(cdll)
    hint = ("set HOLMES_LIBRARY to the path of libholmes.so (e.g. build/lib/libholmes.so), "
            "build the repository into build*/, or install it (make install) where the dynamic "
            "linker finds it")
    raise LibraryNotFoundError("libholmes.so not found; tried: " + "; ".join(tried) + ". " + hint)


def library_path():
    """The file the loaded library came from."""
    return lib()._name
