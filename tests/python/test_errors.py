"""Errors: bad arguments are refused in Python (TypeError/ValueError with a message) before
anything is sent, so the world stays usable; failures only the library sees raise HolmesError
subclasses carrying the status and the library's message. Faults are provoked on communicators
of their own (holmes.init again), so the world stays healthy."""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import holmes


def test_wrong_types_raise_type_error(world):
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError, match="x must be a numpy.ndarray, got list"):
        world.allreduce([1.0, 2.0])
    with pytest.raises(TypeError, match="x is None"):
        world.allreduce(None)
    with pytest.raises(TypeError, match="out is None"):
        world.recv(None, 0)
    with pytest.raises(TypeError, match="dtype bool.*supported: int8"):
        world.allreduce(np.zeros(3, dtype=bool))
    with pytest.raises(TypeError, match="complex128"):
        world.allgather(np.zeros(3, dtype=np.complex128))
    with pytest.raises(TypeError, match="dtype='bfloat16'"):
        world.allreduce(np.zeros(3, dtype=np.uint16))
    with pytest.raises(TypeError, match="native byte order"):
        world.allreduce(np.zeros(3, dtype=">f4"))
    with pytest.raises(TypeError, match="out has dtype float64 but the input has float32"):
        world.allreduce(x, out=np.zeros(4, dtype=np.float64))
    with pytest.raises(TypeError, match="needs a uint16 array"):
        world.allreduce(x, dtype="bfloat16")
    with pytest.raises(TypeError, match="dtype='int32' was asked for"):
        world.allreduce(x, dtype="int32")
    with pytest.raises(TypeError, match="not a Holmes dtype"):
        world.allreduce(x, dtype="float128")
    with pytest.raises(TypeError, match="root must be an int, got str"):
        world.broadcast(x, root="0")
    with pytest.raises(TypeError, match="key must be an int"):
        world.split(0, key=1.5)


def test_wrong_values_raise_value_error(world):
    n = world.size
    x = np.zeros(8 * n, dtype=np.float32)
    with pytest.raises(ValueError, match=r"not C-contiguous.*ascontiguousarray"):
        world.allreduce(x[::2])
    with pytest.raises(ValueError, match=r"not C-contiguous"):
        world.allgather(np.zeros((4, 4), dtype=np.int32).T)
    with pytest.raises(ValueError, match=f"out has 3 elements; allreduce needs {8 * n}"):
        world.allreduce(x, out=np.zeros(3, dtype=np.float32))
    with pytest.raises(ValueError, match="allgather"):
        world.allgather(x, out=np.zeros(8 * n, dtype=np.float32) if n > 1 else np.zeros(1, x.dtype))
    readonly = np.zeros(8 * n, dtype=np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only"):
        world.allreduce(x, out=readonly)
    with pytest.raises(ValueError, match="read-only"):
        world.recv(readonly, 0)
    with pytest.raises(ValueError, match=rf"root is -1: expected a rank in \[0, {n}\)"):
        world.broadcast(x, root=-1)
    with pytest.raises(ValueError, match=rf"root is {n}: expected a rank in \[0, {n}\)"):
        world.reduce(x, root=n)
    with pytest.raises(ValueError, match="peer is"):
        world.send(x, n + 3)
    with pytest.raises(ValueError, match="peer is"):
        world.irecv(x, -2)
    with pytest.raises(ValueError, match="op 'mean' is not a reduction; expected one of 'sum'"):
        world.allreduce(x, "mean")
    with pytest.raises(ValueError, match="color is -3"):
        world.split(-3)
    if n > 1:
        with pytest.raises(ValueError, match=f"not a multiple of the communicator size {n}"):
            world.reduce_scatter(np.zeros(n + 1, dtype=np.float32))
        with pytest.raises(ValueError, match="alltoall"):
            world.ialltoall(np.zeros(2 * n + 1, dtype=np.int8))
    # Nothing was sent: the world still works.
    assert world.allreduce(np.ones(1, dtype=np.int32))[0] == n


def test_destroyed_communicator_refuses_work(world, release):
    sub = world.split(0)
    release(sub)
    sub.destroy()  # harmless twice
    with pytest.raises(ValueError, match="destroyed"):
        sub.barrier()
    with pytest.raises(ValueError, match="destroyed"):
        sub.allreduce(np.ones(2))


def test_library_error_carries_status_and_message(world):
    # Every rank fails alike (an unknown preset) and the ranks agree that they did.
    with pytest.raises(holmes.HolmesError) as caught:
        world.plan(preset="no-such-model")
    error = caught.value
    assert isinstance(error, holmes.InvalidArgumentError)
    assert error.status == holmes.Status.ERR_INVALID_ARGUMENT
    assert int(error.status) == 1
    assert error.status_name == "HM_ERR_INVALID_ARGUMENT"
    assert "hm_plan_create" in error.message and "no-such-model" in error.message, error.message
    assert str(error).startswith("HM_ERR_INVALID_ARGUMENT: hm_plan_create")
    # A check only the library makes, on a healthy communicator.
    with pytest.raises(holmes.InvalidArgumentError, match=f"peer {world.size + 2} is outside"):
        world.peer_transport(world.size + 2)
    with pytest.raises(holmes.InvalidArgumentError, match="peer -1 is outside"):
        world.query_link(-1)
    assert not world.async_error()


def test_device_paths_without_a_gpu_say_why(world):
    # No GPU in this test run: ordering calls on a CUDA stream is refused with the reason, the
    # communicator stays usable, and the per-peer report names the engine of device buffers.
    with pytest.raises(holmes.UnsupportedError, match="hm_comm_set_cuda_stream: no usable CUDA"):
        world.set_cuda_stream(0)
    world.clear_cuda_stream()
    with pytest.raises(TypeError):
        world.set_cuda_stream("stream")
    engine, reason = world.peer_engine(world.rank)
    assert (engine, reason) == ("self", "this rank")
    if world.size > 1:
        engine, reason = world.peer_engine((world.rank + 1) % world.size)
        assert engine in ("ring", "blockwise", "lanes"), (engine, reason)
        assert reason
    with pytest.raises(holmes.InvalidArgumentError, match="peer -1 is outside"):
        world.peer_engine(-1)
    x = np.full(8, world.rank + 1, dtype=np.float32)
    got = world.allreduce(x)
    assert (got == world.size * (world.size + 1) / 2).all()


def test_silent_peer_times_out_naming_it(world):
    if world.size < 2:
        return
    with holmes.init(timeout_ms=700) as comm:
        if comm.rank == 0:
            start = time.monotonic()
            with pytest.raises(holmes.TimedOutError) as caught:
                comm.recv(np.zeros(1, dtype=np.int32), 1)
            took = time.monotonic() - start
            assert caught.value.status_name == "HM_ERR_TIMEOUT"
            assert isinstance(caught.value, TimeoutError)
            assert "rank 1" in caught.value.message, caught.value.message
            assert 0.7 <= took < 4.0, took
            assert comm.async_error() == holmes.Status.ERR_TIMEOUT
        world.barrier()  # rank 1 stays until rank 0 has timed out


def test_abort_wakes_a_blocked_thread(world):
    if world.size < 2:
        return
    with holmes.init(timeout_ms=15000) as comm:
        if comm.rank == 0:
            outcome = {}

            def blocked():
                try:
                    comm.recv(np.zeros(1, dtype=np.int32), 1)
                except holmes.HolmesError as error:
                    outcome["error"] = error

            thread = threading.Thread(target=blocked)
            start = time.monotonic()
            thread.start()
            time.sleep(0.2)
            comm.abort()
            thread.join(5)
            assert not thread.is_alive()
            assert time.monotonic() - start < 5
            assert isinstance(outcome.get("error"), holmes.AbortedError), outcome
            assert comm.async_error() == holmes.Status.ERR_ABORTED
            with pytest.raises(holmes.AbortedError):
                comm.barrier()
            # A nonblocking call on the aborted communicator fails at start or at wait.
            with pytest.raises(holmes.AbortedError):
                comm.iallreduce(np.ones(2)).wait()
        world.barrier()


def test_ranks_that_disagree_get_mismatch(world):
    if world.size < 2:
        return
    with holmes.init(timeout_ms=15000) as comm:
        count = 32 if comm.rank == 0 else 64
        try:
            comm.allreduce(np.ones(count, dtype=np.float32))
            status = 0
        except holmes.HolmesError as error:
            status = int(error.status)
            message = error.message
        world.barrier()  # every rank has seen the failure before any destroys the communicator
    statuses = world.allgather(np.array([status], dtype=np.int64)).reshape(-1)
    allowed = {int(holmes.Status.ERR_MISMATCH), int(holmes.Status.ERR_PEER_FAILED),
               int(holmes.Status.ERR_ABORTED)}
    assert set(statuses.tolist()) <= allowed, statuses
    assert int(holmes.Status.ERR_MISMATCH) in statuses.tolist()
    if status == holmes.Status.ERR_MISMATCH:
        assert "rank" in message, message


def test_missing_library_is_named():
    # A fresh interpreter, no collectives: the same on every rank.
    env = dict(os.environ, HOLMES_LIBRARY="/nonexistent/libholmes.so")
    probe = "import holmes\ntry:\n    holmes.init()\nexcept holmes.LibraryNotFoundError as e:\n" \
            "    print('missing:', e)\n"
    result = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                            text=True, timeout=60, check=True)
    assert "missing: libholmes.so not found; tried: /nonexistent/libholmes.so" in result.stdout
    assert "HOLMES_LIBRARY" in result.stdout


def test_revoke_reaches_a_blocked_peer_and_shrink_keeps_every_rank(world):
    if world.size < 2:
        return
    with holmes.init(timeout_ms=15000) as comm:
        start = time.monotonic()
        if comm.rank == 0:
            time.sleep(0.2)  # the others are blocked in the allreduce by then
            comm.revoke()
        else:
            with pytest.raises(holmes.AbortedError, match="revoked"):
                comm.allreduce(np.ones(8, dtype=np.float32))
            # The revocation, not the 15 s timeout, ended the call.
            assert time.monotonic() - start < 5, time.monotonic() - start
        assert comm.async_error() == holmes.Status.ERR_ABORTED
        # Nobody failed: agreeing on the failed ranks keeps them all, in order.
        with comm.shrink(failed=True) as again:
            assert (again.size, again.rank) == (comm.size, comm.rank)
            total = again.allreduce(np.full(4, comm.rank + 1, dtype=np.int64))
            assert total.tolist() == [comm.size * (comm.size + 1) // 2] * 4
    world.barrier()


def test_shrink_leaves_the_excluded_rank_out(world):
    if world.size < 2:
        return
    with holmes.init(timeout_ms=15000) as comm:
        last = comm.size - 1
        with pytest.raises(TypeError, match="exclude must be an int"):
            comm.shrink(exclude=["x"])
        outcome = None
        try:
            if comm.rank == last:
                with pytest.raises(holmes.AbortedError, match="exclude list"):
                    comm.shrink(exclude=[last])
            else:
                with comm.shrink(exclude=[last]) as rest:
                    got = rest.allgather(np.array([comm.rank], dtype=np.int32)).reshape(-1)
                    outcome = (rest.size, rest.rank, got.tolist())
        finally:
            world.barrier()  # every rank is done with comm before any destroys it
        if comm.rank != last:
            assert outcome == (comm.size - 1, comm.rank, list(range(comm.size - 1)))


def test_grow_takes_in_a_process_that_joins(world):
    with holmes.init(timeout_ms=20000) as comm:
        expected = comm.size * (comm.size + 1) // 2 + 100
        joiner = None
        if comm.rank == 0:
            code = ("import numpy as np, holmes\n"
                    "with holmes.join() as c:\n"
                    "    t = c.allreduce(np.array([100], dtype=np.int64))\n"
                    "    print(c.rank, c.size, int(t[0]), flush=True)\n")
            env = {k: v for k, v in os.environ.items()
                   if k not in ("HOLMES_RANK", "HOLMES_WORLD_SIZE", "HOLMES_LOCAL_RANK")}
            joiner = subprocess.Popen([sys.executable, "-c", code], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        outcome = None
        try:
            with comm.grow(1) as grown:
                total = grown.allreduce(np.array([comm.rank + 1], dtype=np.int64))
                outcome = (grown.size, grown.rank, int(total[0]))
        finally:
            out = joiner.communicate(timeout=60)[0] if joiner else ""
            world.barrier()
        assert outcome == (comm.size + 1, comm.rank, expected)
        if joiner:
            assert joiner.returncode == 0, out
            assert out.split()[-3:] == [str(comm.size), str(comm.size + 1), str(expected)], out
