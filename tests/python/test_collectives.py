"""Every collective through the Python package, checked exactly against numpy references.

Each rank's input is drawn from a generator seeded by (case, rank), so every rank can compute
every other rank's input, and with it the exact expected result. Values are small integers, which
every dtype (float16 and bfloat16 included) holds exactly, so sums and products are exact and the
comparison is bitwise.
"""

import threading
import zlib

import numpy as np
import pytest

import holmes

DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
          "float32", "float64"]
OPS = ["sum", "prod", "min", "max", "avg"]
COUNTS = [0, 1, 7, 1001]


def storage(name):
    """The numpy dtype that holds `name` (bfloat16 travels as its uint16 bits)."""
    return np.dtype(np.uint16) if name == "bfloat16" else np.dtype(name)


def extra(name):
    return {"dtype": "bfloat16"} if name == "bfloat16" else {}


def to_bfloat16_bits(values):
    """float32 -> bfloat16 bits, rounding to nearest even (no NaN here)."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits += 0x7FFF + ((bits >> 16) & 1)
    return (bits >> 16).astype(np.uint16)


def encode(name, values):
    """Logical values (int64 or float) in the dtype's storage."""
    if name == "bfloat16":
        return to_bfloat16_bits(values)
    return np.asarray(values).astype(storage(name))


def logical(name, count, rank, seed, op="sum"):
    """The logical (int64) values `rank` contributes to case `seed`."""
    rng = np.random.default_rng([seed, rank])
    if op == "prod":
        # Products of 2..4 ranks stay exact (and in range) in every dtype.
        choices = [1, 2] if name.startswith("u") else [-1, 1, 2]
        return rng.choice(np.array(choices, dtype=np.int64), count)
    if name.startswith("u"):
        return rng.integers(0, 11, count, dtype=np.int64)
    return rng.integers(-8, 9, count, dtype=np.int64)


def reference(name, op, inputs, n):
    """The exact result of reducing the logical inputs of n ranks with op, in the dtype."""
    stacked = np.stack(inputs)
    if op == "sum":
        return encode(name, stacked.sum(axis=0))
    if op == "prod":
        return encode(name, stacked.prod(axis=0))
    if op == "min":
        return encode(name, stacked.min(axis=0))
    if op == "max":
        return encode(name, stacked.max(axis=0))
    total = stacked.sum(axis=0)
    if name in ("float16", "bfloat16", "float32"):  # halves average in float32
        return encode(name, total.astype(np.float32) / np.float32(n))
    if name == "float64":
        return encode(name, total.astype(np.float64) / n)
    # Integers: the wrapped sum, divided truncating toward zero.
    wrapped = total.astype(storage(name)).astype(np.int64)
    return encode(name, np.sign(wrapped) * (np.abs(wrapped) // n))


def case_seed(*parts):
    """A seed from the case's parameters, the same in every process (str hashes are not)."""
    return zlib.crc32(repr(parts).encode())


def inputs_of(world, name, count, seed, op="sum"):
    """(this rank's array, every rank's logical values)."""
    all_logical = [logical(name, count, r, seed, op) for r in range(world.size)]
    return encode(name, all_logical[world.rank]), all_logical


def assert_bitwise(got, want):
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.reshape(-1).view(np.uint8).tobytes() == want.reshape(-1).view(np.uint8).tobytes(), \
        f"got {got.reshape(-1)[:16]}, want {want.reshape(-1)[:16]}"


# --- allreduce ---------------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("name", DTYPES)
def test_allreduce(world, name, op, count, inplace):
    seed = case_seed("allreduce", name, op, count)
    x, everyone = inputs_of(world, name, count, seed, op)
    before = x.copy()
    if inplace:
        got = world.allreduce(x, op, out=x, **extra(name))
        assert got is x
    else:
        got = world.allreduce(x, op, **extra(name))
        assert_bitwise(x, before)  # the input is left alone
    assert_bitwise(got, reference(name, op, everyone, world.size))


def test_allreduce_large_float32_avg(world):
    count = 300_007  # several pipeline chunks, not a multiple of anything
    x, everyone = inputs_of(world, "float32", count, 11)
    out = np.empty_like(x)
    got = world.allreduce(x, holmes.AVG, out=out)
    assert got is out
    assert_bitwise(got, reference("float32", "avg", everyone, world.size))


def test_allreduce_integer_sum_wraps(world):
    x = np.full(5, 100 + world.rank, dtype=np.int8)
    got = world.allreduce(x)
    want = np.full(5, sum(100 + r for r in range(world.size)), dtype=np.int64).astype(np.int8)
    assert_bitwise(got, want)


def test_allreduce_keeps_the_shape(world):
    x = np.arange(12, dtype=np.float64).reshape(3, 4) * (world.rank + 1)
    got = world.allreduce(x, "max")
    assert got.shape == (3, 4)
    assert_bitwise(got, np.arange(12, dtype=np.float64).reshape(3, 4) * world.size)


# --- reduce_scatter ----------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("count", [1, 5, 333])
@pytest.mark.parametrize("op", ["sum", "max", "avg"])
@pytest.mark.parametrize("name", DTYPES)
def test_reduce_scatter(world, name, op, count, inplace):
    n, r = world.size, world.rank
    x, everyone = inputs_of(world, name, count * n, case_seed("rs", name, op, count), op)
    want = reference(name, op, everyone, n)[r * count:(r + 1) * count]
    if inplace:
        got = world.reduce_scatter(x, op, out=x, **extra(name))
        # The result is this rank's block of x itself.
        assert np.shares_memory(got, x)
        assert got.ctypes.data == x.ctypes.data + r * count * x.itemsize
    else:
        got = world.reduce_scatter(x, op, **extra(name))
    assert got.shape == (count,)
    assert_bitwise(got, want)


def test_reduce_scatter_splits_the_first_axis(world):
    n = world.size
    x = np.ones((2 * n, 3), dtype=np.int32) * (world.rank + 1)
    got = world.reduce_scatter(x)
    assert got.shape == (2, 3)
    assert_bitwise(got, np.full((2, 3), n * (n + 1) // 2, dtype=np.int32))


# --- allgather ---------------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("count", COUNTS)
@pytest.mark.parametrize("name", DTYPES)
def test_allgather(world, name, count, inplace):
    n, r = world.size, world.rank
    x, everyone = inputs_of(world, name, count, case_seed("ag", name, count))
    want = np.stack([encode(name, v) for v in everyone]) if count else np.empty(
        (n, 0), storage(name))
    if inplace:
        out = np.zeros(n * count, dtype=storage(name))
        mine = out[r * count:(r + 1) * count]
        mine[...] = x
        got = world.allgather(mine, out=out, **extra(name))
        assert got is out
    else:
        got = world.allgather(x, **extra(name))
        assert got.shape == (n, count)
    assert_bitwise(got, want)


def test_allgather_stacks_shapes(world):
    x = np.full((2, 2), world.rank, dtype=np.uint8)
    got = world.allgather(x)
    assert got.shape == (world.size, 2, 2)
    assert_bitwise(got, np.repeat(np.arange(world.size, dtype=np.uint8), 4).reshape(-1, 2, 2))


# --- broadcast ---------------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("count", [1, 7, 5000])
@pytest.mark.parametrize("name", DTYPES)
def test_broadcast(world, name, count, root, inplace):
    root = 0 if root == "first" else world.size - 1
    seed = case_seed("bcast", name, count, root)
    x, everyone = inputs_of(world, name, count, seed)
    want = encode(name, everyone[root])
    if world.rank != root:
        x[...] = encode(name, np.zeros(count, dtype=np.int64))  # receivers' contents don't count
    if inplace:
        got = world.broadcast(x, root, out=x, **extra(name))
        assert got is x
    else:
        got = world.broadcast(x, root=root, **extra(name))
        assert got is not x
    assert_bitwise(got, want)


def test_broadcast_into_a_separate_out(world):
    x = np.full(4, world.rank, dtype=np.int64)
    out = np.full(4, -1, dtype=np.int64)
    got = world.broadcast(x, 0, out=out)
    assert got is out
    assert_bitwise(out, np.zeros(4, dtype=np.int64))
    assert_bitwise(x, np.full(4, world.rank, dtype=np.int64))


# --- reduce ------------------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("root", ["first", "last"])
@pytest.mark.parametrize("op", ["sum", "min", "prod"])
@pytest.mark.parametrize("name", DTYPES)
def test_reduce(world, name, op, root, inplace):
    root = 0 if root == "first" else world.size - 1
    x, everyone = inputs_of(world, name, 777, case_seed("reduce", name, op, root), op)
    if inplace:
        got = world.reduce(x, op, root, out=x, **extra(name))
    else:
        got = world.reduce(x, op, root=root, **extra(name))
    if world.rank == root:
        if inplace:
            assert got is x
        assert_bitwise(got, reference(name, op, everyone, world.size))
    else:
        assert got is None


# --- alltoall ----------------------------------------------------------------------------------


@pytest.mark.parametrize("inplace", [False, True], ids=["out", "inplace"])
@pytest.mark.parametrize("count", [0, 1, 9, 1000])
@pytest.mark.parametrize("name", DTYPES)
def test_alltoall(world, name, count, inplace):
    n, r = world.size, world.rank
    x, everyone = inputs_of(world, name, count * n, case_seed("a2a", name, count))
    # Block i of the result is block r of rank i's input.
    want = encode(name, np.concatenate(
        [everyone[i][r * count:(r + 1) * count] for i in range(n)]))
    if inplace:
        got = world.alltoall(x, out=x, **extra(name))
        assert got is x
    else:
        got = world.alltoall(x, **extra(name))
    assert_bitwise(got, want)


# --- barrier, split, point to point ------------------------------------------------------------


def test_barrier(world):
    assert world.barrier() is None


def test_split_by_parity_ordered_by_key(world, release):
    n, r = world.size, world.rank
    # Keys in reverse: the new ranks run opposite to the world's.
    half = world.split(r % 2, key=n - r)
    members = [i for i in range(n) if i % 2 == r % 2]
    got = half.allgather(np.array([r], dtype=np.int32)).reshape(-1)
    size, rank = half.size, half.rank
    release(half)
    assert size == len(members)
    assert rank == len(members) - 1 - members.index(r)
    assert_bitwise(got, np.array(members[::-1], dtype=np.int32))
    assert half.destroyed


def test_split_with_no_color_gets_none(world, release):
    color = None if world.rank == 0 else 0
    sub = world.split(color)
    total = None
    if sub is not None:
        total = sub.allreduce(np.array([world.rank], dtype=np.int64))
    size = None if sub is None else sub.size
    release(sub)
    if world.rank == 0:
        assert sub is None
    else:
        assert size == world.size - 1
        assert total[0] == sum(range(1, world.size))


def test_send_recv_ring(world):
    n, r = world.size, world.rank
    right, left = (r + 1) % n, (r - 1) % n
    message = np.arange(1000, dtype=np.float32) + 1000 * r
    into = np.zeros(1000, dtype=np.float32)
    # Even ranks send first, odd ranks receive first: no cycle of blocked sends.
    if r % 2 == 0:
        world.send(message, right)
        got = world.recv(into, left)
    else:
        got = world.recv(into, left)
        world.send(message, right)
    assert got is into
    assert_bitwise(into, np.arange(1000, dtype=np.float32) + 1000 * left)


def test_send_recv_bfloat16_bits(world):
    if world.size < 2:
        world.barrier()
        return
    bits = to_bfloat16_bits(np.array([1.5, -2.0, 3.0], dtype=np.float32))
    if world.rank == 0:
        world.send(bits, 1, dtype="bfloat16")
    elif world.rank == 1:
        got = world.recv(np.zeros(3, dtype=np.uint16), 0, dtype="bfloat16")
        assert_bitwise(got, bits)
    world.barrier()


# --- nonblocking -------------------------------------------------------------------------------


def test_nonblocking_collectives_in_flight_together(world):
    n, r = world.size, world.rank
    a = np.full(10_000, r + 1, dtype=np.float32)
    b = np.arange(4, dtype=np.int64) + 10 * r
    c = np.full(3, r, dtype=np.int32)
    requests = [
        world.iallreduce(a, out=a),
        world.iallgather(b),
        world.ibroadcast(c, root=n - 1),
        world.ireduce(c, "max", root=0),
        world.ialltoall(np.arange(n, dtype=np.int64) + 100 * r),
        world.ireduce_scatter(np.ones(2 * n, dtype=np.uint32)),
        world.ibarrier(),
    ]
    results = [req.wait() for req in requests]
    assert all(req.done for req in requests)
    assert results[0] is a
    assert_bitwise(a, np.full(10_000, n * (n + 1) / 2, dtype=np.float32))
    assert_bitwise(results[1], np.stack([np.arange(4, dtype=np.int64) + 10 * i for i in range(n)]))
    assert_bitwise(results[2], np.full(3, n - 1, dtype=np.int32))
    if r == 0:
        assert_bitwise(results[3], np.full(3, n - 1, dtype=np.int32))
    else:
        assert results[3] is None
    assert_bitwise(results[4], np.array([r + 100 * i for i in range(n)], dtype=np.int64))
    assert_bitwise(results[5], np.full(2, n, dtype=np.uint32))
    assert results[6] is None
    # wait() again returns the same result.
    assert requests[0].wait() is a


def test_nonblocking_test_polls_until_done(world):
    x = np.full(1 << 16, 2.0, dtype=np.float64)
    request = world.iallreduce(x, "prod")
    polls = 0
    while not request.test():
        polls += 1
    assert request.done
    assert request.test() is True
    assert_bitwise(request.wait(), np.full(1 << 16, 2.0**world.size, dtype=np.float64))


def test_nonblocking_ring_exchange(world):
    n, r = world.size, world.rank
    right, left = (r + 1) % n, (r - 1) % n
    into = np.zeros(50_000, dtype=np.int32)
    recv = world.irecv(into, left)
    send = world.isend(np.full(50_000, r, dtype=np.int32), right)  # the array is kept alive
    assert send.wait() is None
    assert recv.wait() is into
    assert_bitwise(into, np.full(50_000, left, dtype=np.int32))


def test_request_keeps_its_arrays_alive(world):
    request = world.iallreduce(np.ones(100_000, dtype=np.float32))  # no other reference
    got = request.wait()
    assert_bitwise(got, np.full(100_000, world.size, dtype=np.float32))


def test_threads_may_run_collectives_on_their_own_communicators(world, release):
    # ctypes releases the GIL during a call: two communicators progress at once.
    other = world.split(0)
    results = {}

    def run():
        results["other"] = other.allreduce(np.ones(1000, dtype=np.int64))

    thread = threading.Thread(target=run)
    thread.start()
    results["world"] = world.allreduce(np.ones(1000, dtype=np.int64) * 2)
    thread.join()
    release(other)
    assert_bitwise(results["other"], np.full(1000, world.size, dtype=np.int64))
    assert_bitwise(results["world"], np.full(1000, 2 * world.size, dtype=np.int64))


# --- state and queries -------------------------------------------------------------------------


def test_rank_size_and_queries(world):
    assert 0 <= world.rank < world.size
    assert world.async_error() == holmes.Status.SUCCESS
    assert not world.async_error()
    transport, reason = world.peer_transport(world.rank)
    assert transport == "self"
    assert isinstance(reason, str)
    for peer in range(world.size):
        if peer != world.rank:
            transport, reason = world.peer_transport(peer)
            assert transport in ("shm", "tcp", "ucx", "verbs"), transport
            assert reason
            latency_us, gbytes_per_s = world.query_link(peer)
            assert 0 <= latency_us < float("inf") and 0 < gbytes_per_s < float("inf")
    assert repr(world) == f"<holmes.Comm rank {world.rank} of {world.size}>"
    assert holmes.library_version() == 100
