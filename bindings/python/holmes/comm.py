"""Communicators and their collectives on numpy arrays.

Every collective takes C-contiguous numpy arrays and returns a new array, or fills ``out=``
(in place when ``out`` is the input). Arguments are checked here, before anything is sent: a
wrong type raises TypeError, a wrong size, layout or rank ValueError; what only the library can
see (ranks that disagree, a dead peer, a timeout) raises a HolmesError.

Each collective has a nonblocking form, ``i<name>``, with the same arguments: it returns a
:class:`Request`, which holds the arrays until the operation is over, and whose ``wait()`` returns
what the blocking form would have.
"""

import ctypes
import warnings

import numpy as np

from . import _lib
from .errors import Status, check, error_for
from .types import Op, dtype_of, op_of, rank_of

__all__ = ["Comm", "Request", "init", "join"]


def _array(name, value, *, writable=False):
    """`value` checked to be a C-contiguous numpy array (writable when it receives data)."""
    if value is None:
        raise TypeError(f"{name} is None: expected a numpy.ndarray")
    if not isinstance(value, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(value).__name__} "
                        f"(convert it with numpy.asarray)")
    if not value.flags.c_contiguous:
        raise ValueError(f"{name} is not C-contiguous (shape {value.shape}, strides "
                         f"{value.strides}): pass numpy.ascontiguousarray({name})")
    if writable and not value.flags.writeable:
        raise ValueError(f"{name} is read-only: Holmes writes its result there")
    return value


def _same_memory(a, b):
    return a is b or (a.ctypes.data == b.ctypes.data and a.nbytes == b.nbytes)


def _output(out, like, count, shape, what):
    """`out` checked to take `count` elements of `like`'s dtype, or a new array of `shape`."""
    if out is None:
        return np.empty(shape, dtype=like.dtype)
    _array("out", out, writable=True)
    if out.dtype != like.dtype:
        raise TypeError(f"out has dtype {out.dtype} but the input has {like.dtype}")
    if out.size != count:
        raise ValueError(f"out has {out.size} elements; {what} needs {count}")
    return out


def _blocks(name, x, n, collective):
    """The per-rank block size of `x`, which must split into n equal blocks."""
    if x.size % n != 0:
        raise ValueError(f"{collective}: {name} has {x.size} elements, not a multiple of the "
                         f"communicator size {n}")
    return x.size // n


def _block_shape(x, n):
    """The shape of one of n blocks of x: split along the first axis when it divides, else flat."""
    if x.ndim >= 1 and x.shape[0] % n == 0:
        return (x.shape[0] // n,) + x.shape[1:]
    return (x.size // n,)


class _Call:
    """One prepared C call: the function's name without "hm_", its arguments after comm, the
    arrays that must live until it ends, and what the Python call returns."""

    __slots__ = ("name", "args", "keep", "result")

    def __init__(self, name, args, keep, result):
        self.name, self.args, self.keep, self.result = name, args, keep, result


class Request:
    """A nonblocking operation. It owns its arrays until it is over; ``wait()`` returns the
    operation's result (the output array, or None), ``test()`` whether it is over. A request
    dropped before it is over is waited for (with a ResourceWarning), so that the library never
    writes into memory Python has freed."""

    def __init__(self, comm, handle, keep, result):
        self._comm = comm  # the communicator outlives its requests
        self._handle = handle
        self._keep = keep
        self._result = result
        self._error = None

    @property
    def done(self):
        """True once wait() or a successful test() has seen the operation end."""
        return self._handle is None

    def wait(self):
        """Blocks (up to the communicator's timeout) until the operation ends; returns its
        result, or raises the HolmesError it ended with."""
        if self._handle is not None:
            status = _lib.lib().hm_wait(ctypes.byref(self._handle))
            self._finish(status)
        if self._error is not None:
            raise self._error
        return self._result

    def test(self):
        """True if the operation has ended (raising its HolmesError if it failed); never
        blocks."""
        if self._handle is not None:
            done = ctypes.c_int(0)
            status = _lib.lib().hm_test(ctypes.byref(self._handle), ctypes.byref(done))
            if not done.value and status == 0:
                return False
            self._finish(status)
        if self._error is not None:
            raise self._error
        return True

    def _finish(self, status):
        self._handle = None
        self._keep = None
        if status != 0:
            self._error = error_for(status)
            self._result = None

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            warnings.warn("a holmes.Request was dropped before wait(); waiting for it now",
                          ResourceWarning, stacklevel=2)
            try:
                _lib.lib().hm_wait(ctypes.byref(self._handle))
            except Exception:  # pylint: disable=broad-except
                pass  # at interpreter exit, ctypes may already be gone
            self._handle = None

    def __repr__(self):
        return f"<holmes.Request {'done' if self.done else 'pending'}>"


class Comm:
    """A communicator: ``rank``, ``size``, the collectives, ``split``, ``plan``. Destroy it with
    ``destroy()`` or a ``with`` block (it is also destroyed when garbage-collected)."""

    def __init__(self, handle):
        """Wraps an hm_comm_t the caller owns; use holmes.init(), split() or Plan.comm()."""
        self._ptr = handle
        lib = _lib.lib()
        value = ctypes.c_int()
        check(lib.hm_comm_rank(handle, ctypes.byref(value)))
        self.rank = value.value
        check(lib.hm_comm_size(handle, ctypes.byref(value)))
        self.size = value.value

    # --- lifetime --------------------------------------------------------------------------

    @property
    def _handle(self):
        if self._ptr is None:
            raise ValueError("the communicator has been destroyed")
        return self._ptr

    @property
    def destroyed(self):
        return self._ptr is None

    def destroy(self):
        """Releases the communicator; operations still in flight end with AbortedError.
        Calling it twice is harmless."""
        if getattr(self, "_ptr", None) is not None:
            handle, self._ptr = self._ptr, None
            check(_lib.lib().hm_comm_destroy(handle))

    def abort(self):
        """Never blocks: every thread blocked on this communicator returns AbortedError, and so
        does every later call. The communicator must still be destroyed."""
        check(_lib.lib().hm_comm_abort(self._handle))

    def revoke(self):
        """Like abort(), and the other ranks hear of it: their calls on this communicator raise
        AbortedError at once instead of waiting for the timeout. Never blocks."""
        check(_lib.lib().hm_comm_revoke(self._handle))

    def shrink(self, exclude=(), failed=False):
        """Collective over the ranks that remain: a new communicator without the ranks in
        `exclude` and, with failed=True, without the ranks the survivors agree have failed (this
        communicator is revoked first), in this communicator's rank order. A rank left out
        raises AbortedError."""
        ranks = [_int_arg("exclude", r) for r in exclude]
        array = (ctypes.c_int * max(len(ranks), 1))(*ranks)
        flags = _lib.HM_SHRINK_FAILED if failed else _lib.HM_SHRINK_DEFAULT
        out = ctypes.c_void_p()
        check(_lib.lib().hm_comm_shrink(self._handle, array, len(ranks), flags,
                                        ctypes.byref(out)))
        return Comm(out)

    def grow(self, joining):
        """Collective over this communicator and `joining` processes that call holmes.join():
        a communicator of this one's ranks, in order, then the joiners (hm_comm_grow)."""
        out = ctypes.c_void_p()
        check(_lib.lib().hm_comm_grow(self._handle, _int_arg("joining", joining),
                                      ctypes.byref(out)))
        return Comm(out)

    def async_error(self):
        """The communicator's first error as a Status; Status.SUCCESS (falsy) while healthy."""
        status = ctypes.c_int(0)
        check(_lib.lib().hm_comm_get_async_error(self._handle, ctypes.byref(status)))
        return Status(status.value)

    def set_cuda_stream(self, stream):
        """Orders collectives, send and recv on device buffers on a CUDA stream, given as its
        handle (an int, e.g. torch.cuda.current_stream().cuda_stream; 0 is the legacy default
        stream): they return once enqueued (hm_comm_set_cuda_stream). Raises UnsupportedError
        without a usable CUDA device."""
        check(_lib.lib().hm_comm_set_cuda_stream(self._handle,
                                                 ctypes.c_void_p(_int_arg("stream", stream))))

    def clear_cuda_stream(self):
        """Collectives on device buffers block again (hm_comm_clear_cuda_stream)."""
        check(_lib.lib().hm_comm_clear_cuda_stream(self._handle))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # pylint: disable=broad-except
            pass  # at interpreter exit the library may be gone; the OS reclaims everything

    def __repr__(self):
        state = " destroyed" if self.destroyed else ""
        return f"<holmes.Comm rank {self.rank} of {self.size}{state}>"

    # --- structure --------------------------------------------------------------------------

    def split(self, color, key=0):
        """Collective: ranks with the same color (an int >= 0) form a new communicator ordered
        by key, then by rank. color=None takes no part and returns None."""
        if color is None:
            c_color = _lib.HM_COLOR_UNDEFINED
        else:
            c_color = _int_arg("color", color)
            if c_color < 0 or isinstance(color, bool):
                raise ValueError(f"color is {color!r}: expected an int >= 0, or None to take no "
                                 "part")
        c_key = _int_arg("key", key)
        out = ctypes.c_void_p()
        check(_lib.lib().hm_comm_split(self._handle, c_color, c_key, ctypes.byref(out)))
        return Comm(out) if out.value else None

    def peer_transport(self, peer):
        """(transport, reason) for reaching `peer`: e.g. ("shm", "same host")."""
        transport, reason = ctypes.c_char_p(), ctypes.c_char_p()
        check(_lib.lib().hm_comm_peer_transport(self._handle, _int_arg("peer", peer),
                                                ctypes.byref(transport), ctypes.byref(reason)))
        return transport.value.decode(), reason.value.decode()

    def peer_engine(self, peer):
        """(engine, reason) carrying device buffers to `peer` in the hierarchical collectives:
        e.g. ("ipc", ...) inside a host, ("nccl", ...), ("ring", ...), ("lanes", ...) across
        islands."""
        engine, reason = ctypes.c_char_p(), ctypes.c_char_p()
        check(_lib.lib().hm_comm_peer_engine(self._handle, _int_arg("peer", peer),
                                             ctypes.byref(engine), ctypes.byref(reason)))
        return engine.value.decode(), reason.value.decode()

    def query_link(self, peer):
        """(latency_us, gbytes_per_s) the cost model holds for the link to `peer`."""
        latency, bandwidth = ctypes.c_double(), ctypes.c_double()
        check(_lib.lib().hm_comm_query_link(self._handle, _int_arg("peer", peer),
                                            ctypes.byref(latency), ctypes.byref(bandwidth)))
        return latency.value, bandwidth.value

    def plan(self, preset=None, file=None, tp=0, pp=0, **overrides):
        """Collective: the planner's Plan for this world; see holmes.plan.Plan."""
        from .plan import Plan  # pylint: disable=import-outside-toplevel
        return Plan(self, preset=preset, file=file, tp=tp, pp=pp, **overrides)

    # --- running prepared calls -------------------------------------------------------------

    def _run(self, call):
        check(getattr(_lib.lib(), "hm_" + call.name)(self._handle, *call.args))
        return call.result

    def _start(self, call):
        handle = ctypes.c_void_p()
        check(getattr(_lib.lib(), "hm_i" + call.name)(self._handle, *call.args,
                                                      ctypes.byref(handle)))
        return Request(self, handle, call.keep, call.result)

    # --- argument checking, shared by the blocking and nonblocking forms ---------------------

    def _allreduce(self, x, op, out, dtype):
        x = _array("x", x)
        dt, op = dtype_of("x", x, dtype), op_of(op)
        out = _output(out, x, x.size, x.shape, "allreduce")
        return _Call("allreduce", (x.ctypes.data, out.ctypes.data, x.size, dt, op), (x, out), out)

    def _reduce_scatter(self, x, op, out, dtype):
        x = _array("x", x)
        dt, op = dtype_of("x", x, dtype), op_of(op)
        count = _blocks("x", x, self.size, "reduce_scatter")
        if out is not None and isinstance(out, np.ndarray) and _same_memory(out, x):
            _array("out", out, writable=True)
            # In place: the result lands in this rank's block of x (the NCCL convention).
            block = x.reshape(-1)[self.rank * count:(self.rank + 1) * count]
            result = block.reshape(_block_shape(x, self.size))
            return _Call("reduce_scatter",
                         (x.ctypes.data, block.ctypes.data, count, dt, op), (x,), result)
        out = _output(out, x, count, _block_shape(x, self.size), "reduce_scatter (x.size / size)")
        return _Call("reduce_scatter", (x.ctypes.data, out.ctypes.data, count, dt, op), (x, out),
                     out)

    def _allgather(self, x, out, dtype):
        x = _array("x", x)
        dt = dtype_of("x", x, dtype)
        out = _output(out, x, x.size * self.size, (self.size,) + x.shape,
                      "allgather (size * x.size)")
        return _Call("allgather", (x.ctypes.data, out.ctypes.data, x.size, dt), (x, out), out)

    def _broadcast(self, x, root, out, dtype):
        x = _array("x", x)
        dt = dtype_of("x", x, dtype)
        root = rank_of("root", root, self.size)
        if out is None:
            out = x.copy() if self.rank == root else np.empty_like(x)
        elif not (isinstance(out, np.ndarray) and _same_memory(out, x)):
            out = _output(out, x, x.size, x.shape, "broadcast")
            if self.rank == root:
                out.reshape(-1)[...] = x.reshape(-1)
        else:
            _array("out", out, writable=True)
        return _Call("broadcast", (out.ctypes.data, out.size, dt, root), (x, out), out)

    def _reduce(self, x, op, root, out, dtype):
        x = _array("x", x)
        dt, op = dtype_of("x", x, dtype), op_of(op)
        root = rank_of("root", root, self.size)
        if self.rank != root:
            return _Call("reduce", (x.ctypes.data, None, x.size, dt, op, root), (x,), None)
        out = _output(out, x, x.size, x.shape, "reduce")
        return _Call("reduce", (x.ctypes.data, out.ctypes.data, x.size, dt, op, root), (x, out),
                     out)

    def _alltoall(self, x, out, dtype):
        x = _array("x", x)
        dt = dtype_of("x", x, dtype)
        count = _blocks("x", x, self.size, "alltoall")
        out = _output(out, x, x.size, x.shape, "alltoall")
        return _Call("alltoall", (x.ctypes.data, out.ctypes.data, count, dt), (x, out), out)

    def _send(self, x, peer, dtype):
        x = _array("x", x)
        dt = dtype_of("x", x, dtype)
        peer = rank_of("peer", peer, self.size)
        return _Call("send", (x.ctypes.data, x.size, dt, peer), (x,), None)

    def _recv(self, out, peer, dtype):
        out = _array("out", out, writable=True)
        dt = dtype_of("out", out, dtype)
        peer = rank_of("peer", peer, self.size)
        return _Call("recv", (out.ctypes.data, out.size, dt, peer), (out,), out)

    # --- collectives ------------------------------------------------------------------------

    def allreduce(self, x, op=Op.SUM, *, out=None, dtype=None):
        """The elementwise reduction of every rank's x, on every rank (x's shape)."""
        return self._run(self._allreduce(x, op, out, dtype))

    def reduce_scatter(self, x, op=Op.SUM, *, out=None, dtype=None):
        """x holds size equal blocks; rank r gets the reduction of block r. out=x reduces in
        place into x's block r and returns that view."""
        return self._run(self._reduce_scatter(x, op, out, dtype))

    def allgather(self, x, *, out=None, dtype=None):
        """Every rank's x, stacked: shape (size, *x.shape). In place when x is block `rank` of
        out."""
        return self._run(self._allgather(x, out, dtype))

    def broadcast(self, x, root=0, *, out=None, dtype=None):
        """Root's x on every rank (elsewhere x gives only the shape and dtype)."""
        return self._run(self._broadcast(x, root, out, dtype))

    def reduce(self, x, op=Op.SUM, root=0, *, out=None, dtype=None):
        """The reduction of every rank's x on root; None on the other ranks."""
        return self._run(self._reduce(x, op, root, out, dtype))

    def alltoall(self, x, *, out=None, dtype=None):
        """x holds size equal blocks: block j goes to rank j; block i of the result came from
        rank i."""
        return self._run(self._alltoall(x, out, dtype))

    def send(self, x, peer, *, dtype=None):
        """Sends x to peer, whose recv must take as many elements of the same dtype."""
        return self._run(self._send(x, peer, dtype))

    def recv(self, out, peer, *, dtype=None):
        """Receives into out from peer and returns out."""
        return self._run(self._recv(out, peer, dtype))

    def barrier(self):
        """Returns once every rank has entered the barrier."""
        return self._run(_Call("barrier", (), (), None))

    # --- nonblocking forms ------------------------------------------------------------------

    def iallreduce(self, x, op=Op.SUM, *, out=None, dtype=None):
        return self._start(self._allreduce(x, op, out, dtype))

    def ireduce_scatter(self, x, op=Op.SUM, *, out=None, dtype=None):
        return self._start(self._reduce_scatter(x, op, out, dtype))

    def iallgather(self, x, *, out=None, dtype=None):
        return self._start(self._allgather(x, out, dtype))

    def ibroadcast(self, x, root=0, *, out=None, dtype=None):
        return self._start(self._broadcast(x, root, out, dtype))

    def ireduce(self, x, op=Op.SUM, root=0, *, out=None, dtype=None):
        return self._start(self._reduce(x, op, root, out, dtype))

    def ialltoall(self, x, *, out=None, dtype=None):
        return self._start(self._alltoall(x, out, dtype))

    def isend(self, x, peer, *, dtype=None):
        return self._start(self._send(x, peer, dtype))

    def irecv(self, out, peer, *, dtype=None):
        return self._start(self._recv(out, peer, dtype))

    def ibarrier(self):
        return self._start(_Call("barrier", (), (), None))


def _int_arg(name, value):
    try:
        return int(value.__index__())
    except (AttributeError, TypeError):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None


def _text(name, value):
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    return value.encode()


def init(rank=None, world_size=None, store=None, token=None, topology=None, timeout_ms=None,
         serve_store=None, sockets_per_peer=None, local_addr=None):
    """Collective over all ranks: the world communicator.

    Without arguments, from the environment (hm_init_from_env: HOLMES_RANK, HOLMES_WORLD_SIZE,
    HOLMES_STORE, HOLMES_TOKEN, ... or torchrun's, Slurm's, Open MPI's variables; holmes-run
    sets them). Arguments given take precedence over the environment (hm_init with an
    hm_config_t): rank, world_size, store ("host:port"), token, topology (a file), timeout_ms
    (every blocking wait), serve_store (True: this rank serves the store), sockets_per_peer,
    local_addr.
    """
    lib = _lib.lib()
    handle = ctypes.c_void_p()
    given = (rank, world_size, store, token, topology, timeout_ms, serve_store,
             sockets_per_peer, local_addr)
    if all(v is None for v in given):
        check(lib.hm_init_from_env(ctypes.byref(handle)))
        return Comm(handle)
    config = _lib.Config.initializer()
    if rank is not None:
        config.rank = _int_arg("rank", rank)
    if world_size is not None:
        config.world_size = _int_arg("world_size", world_size)
    # The struct keeps the bytes assigned to its char* fields alive (ctypes' _objects).
    config.store, config.token = _text("store", store), _text("token", token)
    config.topology, config.local_addr = _text("topology", topology), _text("local_addr",
                                                                             local_addr)
    if timeout_ms is not None:
        timeout_ms = _int_arg("timeout_ms", timeout_ms)
        if timeout_ms <= 0:
            raise ValueError(f"timeout_ms is {timeout_ms}: expected a positive number of ms")
        config.timeout_ms = timeout_ms
    if serve_store is not None:
        config.serve_store = 1 if serve_store else 0
    if sockets_per_peer is not None:
        config.sockets_per_peer = _int_arg("sockets_per_peer", sockets_per_peer)
    check(lib.hm_init(ctypes.byref(config), ctypes.byref(handle)))
    return Comm(handle)


def join():
    """In a process started to join a running job (its HOLMES_STORE and HOLMES_TOKEN, no rank):
    waits for the job to grow a communicator (Comm.grow) and returns this process's place in it
    (hm_comm_join)."""
    handle = ctypes.c_void_p()
    check(_lib.lib().hm_comm_join(None, ctypes.byref(handle)))
    return Comm(handle)
