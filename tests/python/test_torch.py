"""holmes.torch: collectives on CPU torch tensors share their memory (skipped without torch;
Debian's python3-torch provides it). Every rank skips alike, so collectives stay in step."""

import pytest

torch = pytest.importorskip("torch")
import holmes.torch as ht  # noqa: E402 (after the skip)


def test_collectives_on_tensors_without_copies(world):
    n, r = world.size, world.rank
    grad = torch.full((4, 8), float(r + 1))
    address = grad.data_ptr()
    same = ht.allreduce(world, grad, "sum", out=grad)
    halves = torch.full((n * 2,), float(r), dtype=torch.bfloat16)
    gathered = ht.allgather(world, halves)
    mine = ht.reduce_scatter(world, torch.arange(2 * n, dtype=torch.int64))
    root_value = ht.broadcast(world, torch.tensor([r, r], dtype=torch.int32), root=n - 1)
    assert same is grad and grad.data_ptr() == address  # in place, in the tensor's own memory
    assert torch.equal(grad, torch.full((4, 8), float(n * (n + 1) // 2)))
    assert gathered.dtype == torch.bfloat16 and gathered.shape == (n, 2 * n)
    assert torch.equal(gathered.float(), torch.arange(n).float().repeat_interleave(2 * n)
                       .reshape(n, 2 * n))
    assert torch.equal(mine, torch.tensor([2 * r * n, (2 * r + 1) * n]))
    assert torch.equal(root_value, torch.tensor([n - 1, n - 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="not contiguous"):
        ht.allreduce(world, grad.t())
