"""Every torch.distributed op on backend holmes, against a reference computed here from every
rank's inputs (each rank can compute any rank's input: inputs are functions of the rank)."""

import functools

import pytest
import torch
import torch.distributed as dist

FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]
MOVED = FLOATS + INTS + [torch.bool, torch.int16, torch.complex64]  # every dtype moves
N = 37  # elements: odd, so no power-of-two split hides an off-by-one


def data(rank, dtype, n=N, salt=0, span=5):
    """Rank `rank`'s input: values 1 .. span (sums, and products with span 2, stay exact and in
    range in every dtype at 4 ranks)."""
    i = torch.arange(n, dtype=torch.int64)
    if dtype == torch.bool:
        return (i + rank + salt) % 3 == 0
    if dtype == torch.complex64:
        return torch.complex((i % 5 + rank).float(), (rank - i % 3).float())
    return ((i * 7 + rank * 3 + salt) % span + 1).to(dtype)


def span_of(op):
    return 2 if op == dist.ReduceOp.PRODUCT else 5


def reference(op, dtype, size, n=N, salt=0):
    rows = [data(r, dtype, n, salt, span_of(op)) for r in range(size)]
    if dtype == torch.complex64:
        total = functools.reduce(lambda a, b: a + b, [x.to(torch.complex128) for x in rows])
        return (total if op == dist.ReduceOp.SUM else total / size).to(dtype)
    if op == dist.ReduceOp.SUM:
        if dtype == torch.bool:
            return functools.reduce(torch.logical_or, rows)
        return functools.reduce(lambda a, b: a + b, [x.double() for x in rows]).to(dtype)
    if op == dist.ReduceOp.PRODUCT:
        if dtype == torch.bool:
            return functools.reduce(torch.logical_and, rows)
        return functools.reduce(lambda a, b: a * b, [x.double() for x in rows]).to(dtype)
    if op == dist.ReduceOp.MIN:
        return functools.reduce(torch.minimum, rows)
    if op == dist.ReduceOp.MAX:
        return functools.reduce(torch.maximum, rows)
    if op == dist.ReduceOp.AVG:
        total = functools.reduce(lambda a, b: a + b, [x.double() for x in rows])
        if dtype in INTS:
            return torch.trunc(total / size).to(dtype)  # integer mean truncates (Holmes's rule)
        return (total / size).to(dtype)
    if op == dist.ReduceOp.BAND:
        return functools.reduce(torch.bitwise_and, rows)
    if op == dist.ReduceOp.BOR:
        return functools.reduce(torch.bitwise_or, rows)
    if op == dist.ReduceOp.BXOR:
        return functools.reduce(torch.bitwise_xor, rows)
    raise AssertionError(op)


ARITH = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX,
         dist.ReduceOp.AVG]
BITWISE = [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
REDUCTIONS = ([(op, t) for op in ARITH for t in FLOATS + INTS] +
              [(op, t) for op in BITWISE for t in INTS] +
              [(op, torch.bool) for op in [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT,
                                           dist.ReduceOp.MIN, dist.ReduceOp.MAX] + BITWISE] +
              [(dist.ReduceOp.SUM, torch.complex64), (dist.ReduceOp.AVG, torch.complex64)])


OP_NAMES = {dist.ReduceOp.SUM: "sum", dist.ReduceOp.PRODUCT: "product", dist.ReduceOp.MIN: "min",
            dist.ReduceOp.MAX: "max", dist.ReduceOp.AVG: "avg", dist.ReduceOp.BAND: "band",
            dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor"}


def name(case):
    return f"{OP_NAMES[case[0]]}-{str(case[1]).replace('torch.', '')}"


def strided(x):
    """A non-contiguous tensor holding x's values (every other element of a larger buffer)."""
    backing = torch.zeros(x.numel() * 2, dtype=x.dtype)
    view = backing[::2]
    view.copy_(x)
    assert not view.is_contiguous()
    return view


@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
@pytest.mark.parametrize("case", REDUCTIONS, ids=name)
def test_all_reduce(rank, size, case, contiguous):
    op, dtype = case
    x = data(rank, dtype, span=span_of(op))
    if not contiguous:
        x = strided(x)
    dist.all_reduce(x, op=op)
    assert torch.equal(x, reference(op, dtype, size)), (x, reference(op, dtype, size))


@pytest.mark.parametrize("case", [c for c in REDUCTIONS if c[1] != torch.complex64], ids=name)
def test_reduce(rank, size, case):
    op, dtype = case
    root = size - 1
    x = data(rank, dtype, span=span_of(op))
    before = x.clone()
    dist.reduce(x, dst=root, op=op)
    if rank == root:
        assert torch.equal(x, reference(op, dtype, size))
    else:
        assert torch.equal(x, before)  # other ranks' tensors are left as they were


@pytest.mark.parametrize("case", REDUCTIONS, ids=name)
def test_reduce_scatter_list_and_tensor(rank, size, case):
    op, dtype = case
    n = 5
    full = data(rank, dtype, n * size, span=span_of(op))
    # The list form, each input its own tensor (not adjacent in memory: the backend packs them).
    inputs = [full[i * n:(i + 1) * n].clone() for i in range(size)]
    out_list = torch.zeros(n, dtype=dtype)
    dist.reduce_scatter(out_list, inputs, op=op)
    out_tensor = torch.zeros(n, dtype=dtype)
    dist._reduce_scatter_base(out_tensor, full.clone(), op=op)
    expected = reference(op, dtype, size, n * size)[rank * n:(rank + 1) * n]
    assert torch.equal(out_list, expected)
    assert torch.equal(out_tensor, expected)


@pytest.mark.parametrize("dtype", MOVED, ids=str)
def test_broadcast_from_every_root(rank, size, dtype):
    results = []
    for root in range(size):
        x = data(rank, dtype, salt=root)
        dist.broadcast(x, src=root)
        results.append(x)
    y = strided(data(rank, dtype))
    dist.broadcast(y, src=0)
    for root, x in enumerate(results):
        assert torch.equal(x, data(root, dtype, salt=root))
    assert torch.equal(y, data(0, dtype))


@pytest.mark.parametrize("dtype", MOVED, ids=str)
def test_all_gather_list_and_tensor(rank, size, dtype):
    x = data(rank, dtype, 6).reshape(2, 3)
    separate = [torch.zeros(2, 3, dtype=dtype) for _ in range(size)]
    dist.all_gather(separate, x)
    # Adjacent views of one buffer: gathered in place, no copy.
    buffer = torch.zeros(size, 2, 3, dtype=dtype)
    views = list(buffer.unbind(0))
    dist.all_gather(views, x)
    flat = torch.zeros(size * 6, dtype=dtype)
    dist._all_gather_base(flat, x)
    for r in range(size):
        assert torch.equal(separate[r], data(r, dtype, 6).reshape(2, 3))
        assert torch.equal(buffer[r], data(r, dtype, 6).reshape(2, 3))
        assert torch.equal(flat[r * 6:(r + 1) * 6], data(r, dtype, 6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.int16],
                         ids=str)
def test_all_to_all_single_even_and_uneven(rank, size, dtype):
    # Even: 3 rows per rank.
    x = torch.stack([data(rank * 10 + j, dtype, 4) for j in range(size * 3)])
    even = torch.zeros_like(x)
    dist.all_to_all_single(even, x)
    # Uneven: rank r sends j + 1 rows to rank j (and so receives r + 1 rows from each).
    send_rows = [j + 1 for j in range(size)]
    recv_rows = [rank + 1] * size
    src = torch.cat([torch.full((j + 1, 2), rank * 100 + j).to(dtype) for j in range(size)])
    out = torch.zeros(sum(recv_rows), 2, dtype=dtype)
    dist.all_to_all_single(out, src, output_split_sizes=recv_rows, input_split_sizes=send_rows)
    for j in range(size):
        for k in range(3):
            assert torch.equal(even[j * 3 + k], data(j * 10 + rank * 3 + k, dtype, 4))
        block = out[j * (rank + 1):(j + 1) * (rank + 1)]
        assert torch.equal(block, torch.full((rank + 1, 2), j * 100 + rank).to(dtype))


def test_all_to_all_lists(rank, size):
    inputs = [torch.full((j + 2,), float(rank * 10 + j)) for j in range(size)]
    outputs = [torch.zeros(rank + 2) for _ in range(size)]
    dist.all_to_all(outputs, inputs)
    for j in range(size):
        assert torch.equal(outputs[j], torch.full((rank + 2,), float(j * 10 + rank)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float16], ids=str)
def test_gather_and_scatter(rank, size, dtype):
    root = 1 % size
    x = data(rank, dtype, 9)
    gathered = [torch.zeros(9, dtype=dtype) for _ in range(size)] if rank == root else None
    dist.gather(x, gather_list=gathered, dst=root)
    out = torch.zeros(9, dtype=dtype)
    pieces = [data(100 + j, dtype, 9) for j in range(size)] if rank == root else None
    dist.scatter(out, scatter_list=pieces, src=root)
    if rank == root:
        for r in range(size):
            assert torch.equal(gathered[r], data(r, dtype, 9))
    assert torch.equal(out, data(100 + rank, dtype, 9))


def test_send_recv_with_tags(rank, size):
    if size < 2:
        return
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    # Sent tag 3 then tag 9; received tag 9 first: tags match independently.
    a, b = torch.full((1000,), float(rank)), torch.full((3,), float(-rank))
    works = [dist.isend(a, nxt, tag=3), dist.isend(b, nxt, tag=9)]
    got_b, got_a = torch.zeros(3), torch.zeros(1000)
    dist.recv(got_b, src=prev, tag=9)
    dist.recv(got_a, src=prev, tag=3)
    for w in works:
        w.wait()
    assert torch.equal(got_a, torch.full((1000,), float(prev)))
    assert torch.equal(got_b, torch.full((3,), float(-prev)))


def test_recv_from_any_source_names_the_sender(rank, size):
    """dist.recv(src=None) takes each message once, each sender's in the order it sent them, and
    returns the sender; dist.irecv(src=None) names it in the work; in a subgroup dist.recv
    returns the sender's global rank."""
    if size < 2:
        return
    def payload(sender, k):
        return torch.full((1000,), float(100 * k + sender))
    if rank == 0:
        taken = {r: 0 for r in range(1, size)}
        for _ in range(2 * (size - 1)):
            got = torch.zeros(1000)
            src = dist.recv(got, tag=4)
            assert src in taken, src
            assert torch.equal(got, payload(src, taken[src]))
            taken[src] += 1
        assert all(n == 2 for n in taken.values()), taken
        got = torch.zeros(1000)
        work = dist.irecv(got, tag=5)
        work.wait()
        assert work._source_rank() == size - 1
        assert torch.equal(got, payload(size - 1, 7))
    else:
        works = [dist.isend(payload(rank, k), 0, tag=4) for k in range(2)]
        if rank == size - 1:
            works.append(dist.isend(payload(rank, 7), 0, tag=5))
        for w in works:
            w.wait()
    # A subgroup without rank 0: its first member receives from any source, and dist.recv
    # returns global ranks.
    others = list(range(1, size))
    group = dist.new_group(others, backend="holmes") if size > 2 else None
    if group is not None and rank in others:
        if rank == 1:
            senders = set()
            for _ in range(size - 2):
                got = torch.zeros(3)
                src = dist.recv(got, group=group)
                assert torch.equal(got, torch.full((3,), float(src)))
                senders.add(src)
            assert senders == set(range(2, size))
        else:
            dist.send(torch.full((3,), float(rank)), 1, group=group)
    dist.barrier()


def test_batch_isend_irecv_ring(rank, size):
    if size < 2:
        return
    nxt, prev = (rank + 1) % size, (rank - 1) % size
    out, into = torch.arange(50, dtype=torch.float64) + rank, torch.zeros(50, dtype=torch.float64)
    ops = [dist.P2POp(dist.irecv, into, prev), dist.P2POp(dist.isend, out, nxt)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(into, torch.arange(50, dtype=torch.float64) + prev)


def test_barrier_and_async_work(rank, size):
    dist.barrier()
    x = torch.ones(1 << 16)
    work = dist.all_reduce(x, async_op=True)
    future = work.get_future()
    assert work.wait()
    assert work.is_completed() and work.is_success()  # (torch 1.13 cannot return exception())
    value = future.wait()
    assert torch.equal(value[0], torch.full((1 << 16,), float(size)))
    assert torch.equal(x, torch.full((1 << 16,), float(size)))


def test_futures_chain_like_a_ddp_comm_hook(rank, size):
    x = torch.full((100,), float(rank + 1))
    fut = dist.all_reduce(x, async_op=True).get_future()
    averaged = fut.then(lambda f: f.value()[0] / size)
    expected = sum(range(1, size + 1)) / size
    assert torch.allclose(averaged.wait(), torch.full((100,), expected))


def test_new_group_subgroups(rank, size):
    evens = [r for r in range(size) if r % 2 == 0]
    odds = [r for r in range(size) if r % 2 == 1]
    g_even = dist.new_group(evens, backend="holmes")
    g_odd = dist.new_group(odds, backend="holmes") if odds else None
    mine = g_even if rank % 2 == 0 else g_odd
    members = evens if rank % 2 == 0 else odds
    x = torch.tensor([float(rank)])
    dist.all_reduce(x, group=mine)
    y = torch.zeros(1)
    if dist.get_rank(mine) == 0:
        y += 42
    dist.broadcast(y, src=members[0], group=mine)
    assert x.item() == sum(members)
    assert y.item() == 42
    assert dist.get_world_size(mine) == len(members)


def test_peer_transports_name_every_rank(rank, size):
    import holmes.torch
    transports = holmes.torch.peer_transports()
    assert len(transports) == size
    assert transports[rank][0] == "self"
    assert all(t[0] in ("shm", "tcp", "ucx", "verbs", "self") for t in transports)
