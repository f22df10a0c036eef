"""DDP on backend holmes trains to the same parameters as DDP on torch's gloo backend, in the
same processes on the same data (to 1e-6 of the parameters' magnitude: the two sum gradients in
different orders)."""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def make_model():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Linear(64, 4))


def test_ddp_parameters_equal_gloos(rank, size):
    gloo = dist.new_group(list(range(size)), backend="gloo")
    # Small buckets: several allreduces per step, overlapping the backward pass.
    holmes_ddp = DDP(make_model(), process_group=dist.group.WORLD, bucket_cap_mb=0.01)
    gloo_ddp = DDP(make_model(), process_group=gloo, bucket_cap_mb=0.01)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
                  for m in (holmes_ddp, gloo_ddp)]
    losses = {0: [], 1: []}
    for step in range(12):
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        for i, (model, opt) in enumerate(zip((holmes_ddp, gloo_ddp), optimizers)):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses[i].append(loss.item())
    dist.destroy_process_group(gloo)
    for p, q in zip(holmes_ddp.parameters(), gloo_ddp.parameters()):
        scale = q.abs().max().item()
        assert (p - q).abs().max().item() <= 1e-6 * scale, (p, q)
    # It trained: the loss moved (the same on both, step by step).
    assert losses[0][-1] != losses[0][0]
    for a, b in zip(*losses.values()):
        assert abs(a - b) <= 1e-5 * max(abs(b), 1e-3)
