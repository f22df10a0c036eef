"""A torch trainer on Holmes's plan: pipeline stages across islands, DDP inside them.

A stack of residual dense layers (x + tanh(W x + b)) learns a fixed map. holmes.torch.plan_groups
gives this rank its pipeline and data-parallel groups and its layers (the planner keeps each DP
group inside one island and lets only stage boundaries cross islands); activations and their
gradients go between stages with dist.send/dist.recv (GPipe order: every micro-batch forward,
then every one backward), and each stage's gradients are summed over its data-parallel group in
one flat all_reduce per step (as Megatron does: DDP's reducer cannot sync gradients accumulated
over several micro-batches in flight; with one stage the script wraps the model in DDP).

    holmes-run -n 8 --torch -- examples/trainer/emulated_rank.sh \\
        /usr/bin/python3 examples/torch/train.py                       # backend holmes, its plan
    ... train.py --backend gloo --placement naive                       # the same on gloo

With --backend gloo the same script runs on torch's gloo backend, on the placement a trainer
gets without Holmes (Megatron's rank order, even layer split; planned by Holmes on a helper
group so that both runs split the same way the planner says the naive one does). Every step's
loss equals the single-process reference (--reference) to --tolerance; the summary (--summary)
holds the mean step time.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="holmes", choices=["holmes", "gloo"])
    p.add_argument("--placement", default=None, choices=["holmes", "naive"],
                   help="default: holmes on backend holmes, naive on gloo")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--micro-batch", type=int, default=16)
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--pp", type=int, default=2, help="pipeline stages (0: the planner chooses)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--reference", action="store_true", help="one process, no communication")
    p.add_argument("--losses-out", help="write every step's loss here (one per line)")
    p.add_argument("--compare-with", help="a --losses-out file every step's loss must match")
    p.add_argument("--tolerance", type=float, default=1e-4, help="relative, per step")
    p.add_argument("--summary", help="write the run's figures here (JSON, rank 0)")
    return p.parse_args()


class Residual(nn.Module):
    """x + tanh(W x + b): deep stacks of it still pass gradients."""

    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


def make_layers(n, width):
    torch.manual_seed(7)
    return [Residual(width) for _ in range(n)]


def samples(step, first, count, width):
    """Samples first .. first + count of a step (4 batches in turn): the same on every rank."""
    g = torch.Generator().manual_seed(1_000_003 * (step % 4) + first)  # 4 batches, cycled
    x = torch.randn(count, width, generator=g)
    teacher = torch.Generator().manual_seed(5)
    a = torch.randn(width, width, generator=teacher) / width ** 0.5
    return x, torch.tanh(x @ a)


def reference(o):
    layers = nn.Sequential(*make_layers(o.layers, o.width))
    opt = torch.optim.SGD(layers.parameters(), lr=o.lr)
    losses = []
    for step in range(o.steps):
        opt.zero_grad()
        total = 0.0
        for mb in range(o.global_batch // o.micro_batch):
            x, y = samples(step, mb * o.micro_batch, o.micro_batch, o.width)
            loss = ((layers(x) - y) ** 2).mean() / (o.global_batch // o.micro_batch)
            loss.backward()
            total += loss.item()
        opt.step()
        losses.append(total)
    return losses


def main():
    o = parse()
    torch.set_num_threads(1)
    if o.reference:
        losses = reference(o)
        print(f"reference loss {losses[0]:.5f} -> {losses[-1]:.5f} over {o.steps} steps")
        if o.losses_out:
            with open(o.losses_out, "w") as f:
                f.write("".join(f"{v!r}\n" for v in losses))
        return 0

    import holmes.torch
    placement = o.placement or ("holmes" if o.backend == "holmes" else "naive")
    dist.init_process_group(o.backend, timeout=datetime.timedelta(seconds=120))
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # The planner runs on a holmes group; on gloo a helper holmes group plans only.
    planner = None if o.backend == "holmes" else dist.new_group(backend="holmes")
    g = holmes.torch.plan_groups(
        preset="mlp", architecture="mlp", layers=o.layers, hidden=o.width,
        micro_batch=o.micro_batch, global_batch=o.global_batch, dtype_bytes=4, tp=1, pp=o.pp,
        naive=placement == "naive", world=planner, backend=o.backend)
    stage, stages = g.stage, g.num_stages
    dp_size, dp_index = len(g.data_ranks), g.data_ranks.index(rank)
    micro = g.micro_batches  # per replica per step
    assert micro * dp_size * o.micro_batch == o.global_batch, (micro, dp_size)
    all_layers = make_layers(o.layers, o.width)
    module = nn.Sequential(*all_layers[g.layers.start:g.layers.stop])
    # One stage: plain DDP. Several: gradients summed over the data group after the pipeline.
    use_ddp = stages == 1 and dp_size > 1
    model = DDP(module, process_group=g.data) if use_ddp else module
    opt = torch.optim.SGD(module.parameters(), lr=o.lr)
    previous = g.pipeline_ranks[stage - 1] if stage > 0 else None
    following = g.pipeline_ranks[stage + 1] if stage + 1 < stages else None
    last = following is None
    # The rank that holds the step's loss: the last stage of replica 0 (rank 0 is in replica 0).
    owner = torch.tensor([g.pipeline_ranks[-1] if dp_index == 0 else -1])
    dist.all_reduce(owner, op=dist.ReduceOp.MAX)
    owner = int(owner.item())
    if rank == 0:
        print(f"{o.backend} backend, {placement} placement: {stages} stages, "
              f"{dp_size}-way data parallel per stage, {micro} micro-batches per replica")
    print(f"rank {rank}: stage {stage} layers {g.layers.start}..{g.layers.stop - 1}, "
          f"pipeline {g.pipeline_ranks}, data {g.data_ranks}", flush=True)

    reference_losses = None
    if o.compare_with:
        with open(o.compare_with) as f:
            reference_losses = [float(line) for line in f]
    losses, times = [], []
    for step in range(o.steps):
        start = time.perf_counter()
        opt.zero_grad()
        inputs, outputs, total = [], [], torch.zeros(1)
        # Forward every micro-batch, then backward every one (GPipe order).
        for mb in range(micro):
            first = (dp_index * micro + mb) * o.micro_batch
            x, y = samples(step, first, o.micro_batch, o.width)
            if previous is not None:
                x = torch.empty(o.micro_batch, o.width)
                dist.recv(x, previous)
                x.requires_grad_(True)
            inputs.append(x)
            if use_ddp:
                # One stage (no pipeline): each micro-batch forward and backward at once, DDP's
                # reducer syncing on the last one.
                with model.no_sync() if mb + 1 < micro else _nothing():
                    loss = ((model(x) - y) ** 2).mean() / (micro * dp_size)
                    loss.backward()
                total += loss.detach()
                continue
            outputs.append((model(x), y))
            if not last:
                dist.send(outputs[-1][0].detach(), following)
        for mb in reversed(range(micro)):
            if use_ddp:
                break
            out, y = outputs[mb]
            if last:
                loss = ((out - y) ** 2).mean() / (micro * dp_size)
                loss.backward()
                total += loss.detach()
            else:
                grad = torch.empty_like(out)
                dist.recv(grad, following)
                out.backward(grad)
            if previous is not None:
                dist.send(inputs[mb].grad, previous)
        if dp_size > 1 and not use_ddp:
            grads = [p.grad for p in module.parameters()]
            flat = torch.cat([t.reshape(-1) for t in grads])
            dist.all_reduce(flat, group=g.data)
            offset = 0
            for t in grads:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
        opt.step()
        # The step's loss: summed over the last stage's replicas, then sent to every rank.
        if last and dp_size > 1:
            dist.all_reduce(total, group=g.data)
        dist.broadcast(total, src=owner)
        times.append(time.perf_counter() - start)
        losses.append(total.item())
        if rank == 0:
            print(f"step {step + 1}/{o.steps} loss {losses[-1]:.6f} {times[-1] * 1e3:.1f} ms",
                  flush=True)

    failed = 0
    if reference_losses is not None:
        for step, (got, want) in enumerate(zip(losses, reference_losses)):
            if abs(got - want) > o.tolerance * abs(want):
                failed += 1
                if rank == 0:
                    print(f"step {step + 1}: loss {got!r} differs from the reference {want!r}")
        if rank == 0 and not failed:
            print(f"every step's loss matches the single-process reference "
                  f"(relative {o.tolerance:g})")
    skip = min(2, o.steps - 1)  # warm-up steps
    mean_ms = 1e3 * sum(times[skip:]) / len(times[skip:])
    if rank == 0:
        print(f"mean step {mean_ms:.1f} ms ({o.backend}, {placement}; steps {skip + 1}..{o.steps})")
        if o.summary:
            with open(o.summary, "w") as f:
                json.dump({"backend": o.backend, "placement": placement, "mean_step_ms": mean_ms,
                           "losses": losses, "predicted_step_s": g.predicted_step_seconds,
                           "predicted_naive_step_s": g.naive_step_seconds}, f)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if failed else 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
