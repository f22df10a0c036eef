"""What the holmes backend cannot do raises RuntimeError naming the op, the dtype and the
backend; disagreeing ranks get an error, not a hang."""

import datetime

import pytest
import torch
import torch.distributed as dist


def test_unsupported_dtype_and_op_are_refused_by_name(rank, size):
    with pytest.raises(RuntimeError, match=r"holmes backend: allreduce with op SUM on dtype "
                                           r"Short is not supported"):
        dist.all_reduce(torch.ones(4, dtype=torch.int16))
    with pytest.raises(RuntimeError, match=r"holmes backend: allreduce with op BAND on dtype "
                                           r"Float is not supported \(bitwise ops take integer"):
        dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND)
    with pytest.raises(RuntimeError, match=r"op AVG on dtype Bool is not supported"):
        dist.all_reduce(torch.ones(4, dtype=torch.bool), op=dist.ReduceOp.AVG)
    with pytest.raises(RuntimeError, match=r"holmes backend: reduce_scatter with op MAX on dtype "
                                           r"ComplexFloat"):
        dist.reduce_scatter(torch.zeros(2, dtype=torch.complex64),
                            [torch.zeros(2, dtype=torch.complex64)] * size,
                            op=dist.ReduceOp.MAX)


def test_bad_arguments_are_refused_before_anything_is_sent(rank, size):
    with pytest.raises(RuntimeError, match=r"holmes backend: send: tag -1 is outside"):
        dist.send(torch.ones(1), (rank + 1) % size, tag=-1)
    with pytest.raises(RuntimeError, match=r"recv from any source: tag -1 is outside"):
        dist.recv(torch.ones(1), tag=-1)
    with pytest.raises(RuntimeError, match=r"all_gather_into_tensor: the output has 3 elements"):
        dist._all_gather_base(torch.zeros(3), torch.zeros(2))
    with pytest.raises(RuntimeError, match=r"all_to_all_single: the input splits do not add up"):
        dist.all_to_all_single(torch.zeros(size), torch.zeros(size),
                               output_split_sizes=[1] * size, input_split_sizes=[2] * size)
    # The world still works after refusals: nothing was half sent.
    x = torch.ones(3)
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((3,), float(size)))


def test_ranks_that_disagree_on_sizes_get_an_error_not_a_hang(rank, size):
    if size < 2:
        return
    # Its own group: the failure poisons the group it happens in, not the world.
    group = dist.new_group(list(range(size)), backend="holmes",
                           timeout=datetime.timedelta(seconds=8))
    x = torch.ones(1000 if rank == 0 else 1001)
    with pytest.raises(RuntimeError, match=r"holmes backend: allreduce failed"):
        dist.all_reduce(x, group=group)
    # Everybody has given up on the bad group before anyone destroys it.
    dist.barrier()
    dist.destroy_process_group(group)


def test_holmes_calls_refuse_other_groups_by_name(rank, size):
    import holmes.torch
    gloo = dist.new_group(backend="gloo")
    with pytest.raises(TypeError, match=r"expected a process group of backend 'holmes', got one "
                                        r"of 'gloo'"):
        holmes.torch.peer_transports(gloo)
    with pytest.raises(TypeError, match=r"expected a process group of backend 'holmes', got a "
                                        r"int"):
        holmes.torch.revoke(42)
    dist.barrier(group=gloo)
