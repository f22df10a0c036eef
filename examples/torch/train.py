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

Losing a rank (backend holmes; start the ranks with holmes-run --elastic):

    ... train.py --kill-rank 5 --kill-step 3 --kill-stamp /tmp/kill

rank 5 kills itself (SIGKILL) in step 3 after its first forward. The survivors' calls fail,
they revoke their groups (so nobody waits for the timeout), shrink the world
(holmes.torch.shrink_group: they agree on who failed), re-plan the model on themselves
(PlanGroups.replan: the lost replica is taken out, the global batch kept), copy the weights of
the layers each now holds from the survivor that holds them (PlanGroups.layer_sources), and run
the failed step again; no rank had applied its update, so every step's loss still equals the
reference's. Rank 0 prints the time from the kill to the end of the first resumed step. Every
call goes through the groups' own methods with ranks of the group, because torch cannot create
or register groups once a rank of its world is dead (new_group waits for every rank): the
groups of a re-plan are Holmes's, and work the same way.
"""

import argparse
import datetime
import json
import os
import re
import signal
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
    p.add_argument("--kill-rank", type=int, default=-1,
                   help="this rank SIGKILLs itself in --kill-step; the others recover and go on")
    p.add_argument("--kill-step", type=int, default=-1, help="the step (from 0) it dies in")
    p.add_argument("--kill-stamp", help="file the victim writes its time of death to")
    o = p.parse_args()
    if o.kill_rank >= 0 and (o.kill_step < 0 or not o.kill_stamp or o.backend != "holmes"):
        p.error("--kill-rank needs --kill-step, --kill-stamp and --backend holmes")
    if o.global_batch % o.micro_batch:
        p.error("--global-batch must be a multiple of --micro-batch")
    return o


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


class Placed:
    """This rank's part of the training on a plan: its stage's layers and optimizer, and the
    calls it makes on the plan's groups, by ranks of the plan's world."""

    def __init__(self, o, g, module, recovered=False):
        self.g, self.world, self.rank = g, g.world, g.rank
        self.module = module
        self.opt = torch.optim.SGD(module.parameters(), lr=o.lr) if not g.spare else None
        stage = g.stage
        self.previous = g.pipeline_ranks[stage - 1] if stage > 0 else None
        self.following = g.pipeline_ranks[stage + 1] if 0 <= stage < g.num_stages - 1 else None
        self.dp_size = len(g.data_ranks)
        self.dp_index = g.data_ranks.index(self.rank) if not g.spare else -1
        # One stage: plain DDP (torch's reducer; not on a re-plan's groups, which torch does not
        # know). Several: gradients summed over the data group after the pipeline.
        self.use_ddp = g.num_stages == 1 and self.dp_size > 1 and not recovered
        self.model = DDP(module, process_group=g.data) if self.use_ddp else module
        # The first micro-batch of this replica: the global batch's micro-batches divide over the
        # replicas in order, the first (total % dp) taking one more (as hm_plan_replan says).
        total = o.global_batch // o.micro_batch
        if not g.spare:
            base, extra = divmod(total, self.dp_size)
            self.first_micro = self.dp_index * base + min(self.dp_index, extra)
            assert g.micro_batches == base + (self.dp_index < extra), (g.micro_batches, total)
        # The rank that holds the step's loss: the last stage of replica 0.
        owner = torch.tensor([g.pipeline_ranks[-1] if self.dp_index == 0 else -1])
        self.all_reduce(self.world, owner, dist.ReduceOp.MAX)
        self.owner = int(owner.item())

    def send(self, t, to):
        self.g.pipeline.send([t], self.g.pipeline_ranks.index(to), 0).wait()

    def recv(self, t, source):
        self.g.pipeline.recv([t], self.g.pipeline_ranks.index(source), 0).wait()

    @staticmethod
    def all_reduce(group, t, op=dist.ReduceOp.SUM):
        opts = dist.AllreduceOptions()
        opts.reduceOp = op
        group.allreduce([t], opts).wait()

    def broadcast_loss(self, total):
        opts = dist.BroadcastOptions()
        opts.rootRank = self.owner
        self.world.broadcast([total], opts).wait()


def train_step(o, p, step, die):
    """One step on this rank's stage; returns the loss it holds (summed over the global batch on
    the owner after broadcast_loss). `die`: this rank kills itself after its first forward."""
    total = torch.zeros(1)
    g = p.g
    if g.spare:
        p.broadcast_loss(total)
        return total
    micro, last = g.micro_batches, p.following is None
    divisor = o.global_batch // o.micro_batch  # micro-batches in the step, all replicas
    p.opt.zero_grad()
    inputs, outputs = [], []
    # Forward every micro-batch, then backward every one (GPipe order).
    for mb in range(micro):
        x, y = samples(step, (p.first_micro + mb) * o.micro_batch, o.micro_batch, o.width)
        if p.previous is not None:
            x = torch.empty(o.micro_batch, o.width)
            p.recv(x, p.previous)
            x.requires_grad_(True)
        inputs.append(x)
        if p.use_ddp:
            # One stage (no pipeline): each micro-batch forward and backward at once, DDP's
            # reducer syncing on the last one.
            with p.model.no_sync() if mb + 1 < micro else _nothing():
                loss = ((p.model(x) - y) ** 2).mean() / divisor
                loss.backward()
            total += loss.detach()
            continue
        outputs.append((p.model(x), y))
        if not last:
            p.send(outputs[-1][0].detach(), p.following)
        if die:
            with open(o.kill_stamp, "w") as f:
                f.write(f"{time.time() * 1e3:.3f}\n")
            sys.stdout.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    for mb in reversed(range(micro)):
        if p.use_ddp:
            break
        out, y = outputs[mb]
        if last:
            loss = ((out - y) ** 2).mean() / divisor
            loss.backward()
            total += loss.detach()
        else:
            grad = torch.empty_like(out)
            p.recv(grad, p.following)
            out.backward(grad)
        if p.previous is not None:
            p.send(inputs[mb].grad, p.previous)
    if p.dp_size > 1 and not p.use_ddp:
        grads = [t.grad for t in p.module.parameters()]
        flat = torch.cat([t.reshape(-1) for t in grads])
        p.all_reduce(g.data, flat)
        offset = 0
        for t in grads:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()
    p.opt.step()
    # The step's loss: summed over the last stage's replicas, then sent to every rank.
    if last and p.dp_size > 1:
        p.all_reduce(g.data, total)
    p.broadcast_loss(total)
    return total


def lost_a_rank(error):
    """Whether a failed call is what a lost rank causes (the peer gone, a revocation, a
    timeout), which the survivors recover from."""
    return re.search(r"HM_ERR_(PEER_FAILED|ABORTED|TIMEOUT)", str(error)) is not None


def flat_parameters(layer):
    return torch.cat([t.detach().reshape(-1) for t in layer.parameters()])


def restage(o, g, before):
    """After a re-plan: the layers this rank now holds, their weights copied from where they are
    (this rank's old stage, or the survivor layer_sources names). Collective over g.world."""
    world, me = g.world, g.rank
    held = dict(zip(before.g.layers, before.module)) if before is not None else {}
    sends, outbox = [], []
    for r in range(world.size()):
        for first, count, source in g.layer_sources(r):
            if source < 0:
                raise RuntimeError(f"layers {first}-{first + count - 1} of rank {r}: no survivor "
                                   "holds them (they need a checkpoint)")
            if source != me:
                continue
            for layer in range(first, first + count):
                outbox.append(flat_parameters(held[layer]))
                sends.append(world.send([outbox[-1]], r, layer))  # tag: the layer
    layers = make_layers(o.layers, o.width)[g.layers.start:g.layers.stop]
    source_of = {layer: me for layer in g.layers}
    for first, count, source in g.layer_sources():
        source_of.update({layer: source for layer in range(first, first + count)})
    with torch.no_grad():
        for index, layer in zip(g.layers, layers):
            if source_of[index] == me:
                flat = flat_parameters(held[index])
            else:
                flat = torch.empty_like(flat_parameters(layer))
                world.recv([flat], source_of[index], index).wait()
            offset = 0
            for t in layer.parameters():
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()
    for w in sends:
        w.wait()
    return nn.Sequential(*layers)


def recover(o, p, error):
    """The survivors of a lost rank: revoke, shrink, re-plan, copy the weights. Returns the new
    Placed and a line about it."""
    import holmes.torch
    start = time.perf_counter()
    for group in (p.g.pipeline, p.g.data, p.g.tensor, p.world):
        if group is not None:
            holmes.torch.revoke(group)
    survivors = holmes.torch.shrink_group(p.world, failed=True)
    shrunk = time.perf_counter()
    g = p.g.replan(survivors)
    module = restage(o, g, p)
    placed = Placed(o, g, module, recovered=True)
    copied = time.perf_counter()
    lost = p.world.size() - survivors.size()
    line = (f"lost {lost} of {p.world.size()} ranks ({str(error).splitlines()[0][:160]}): shrink "
            f"{(shrunk - start) * 1e3:.0f} ms, re-plan and weights {(copied - shrunk) * 1e3:.0f} "
            f"ms; re-planned on {survivors.size()} ranks: pp {g.num_stages} x dp "
            f"{max(len(g.data_ranks), 1)}")
    return placed, line


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
    rank = dist.get_rank()
    # The planner runs on a holmes group; on gloo a helper holmes group plans only.
    planner = None if o.backend == "holmes" else dist.new_group(backend="holmes")
    g = holmes.torch.plan_groups(
        preset="mlp", architecture="mlp", layers=o.layers, hidden=o.width,
        micro_batch=o.micro_batch, global_batch=o.global_batch, dtype_bytes=4, tp=1, pp=o.pp,
        naive=placement == "naive", world=planner, backend=o.backend)
    if o.backend != "holmes":
        # The plan's world is the helper group; the run's is the default (gloo) group.
        g.world = dist.distributed_c10d._get_default_group()
    module = nn.Sequential(*make_layers(o.layers, o.width)[g.layers.start:g.layers.stop])
    p = Placed(o, g, module)
    if rank == 0:
        print(f"{o.backend} backend, {placement} placement: {g.num_stages} stages, "
              f"{p.dp_size}-way data parallel per stage, {g.micro_batches} micro-batches per "
              "replica")
    print(f"rank {rank}: stage {g.stage} layers {g.layers.start}..{g.layers.stop - 1}, "
          f"pipeline {g.pipeline_ranks}, data {g.data_ranks}", flush=True)

    reference_losses = None
    if o.compare_with:
        with open(o.compare_with) as f:
            reference_losses = [float(line) for line in f]
    losses, times = [], []
    recovered, report_recovery = False, False
    step = 0
    while step < o.steps:
        start = time.perf_counter()
        die = rank == o.kill_rank and step == o.kill_step and not recovered
        try:
            total = train_step(o, p, step, die)
        except RuntimeError as error:
            if o.kill_rank < 0 or recovered or not lost_a_rank(error):
                raise
            p, line = recover(o, p, error)
            recovered = report_recovery = True
            if p.rank == 0:
                print(line, flush=True)
            continue  # the same step again, on the survivors
        times.append(time.perf_counter() - start)
        losses.append(total.item())
        if p.rank == 0:
            print(f"step {step + 1}/{o.steps} loss {losses[-1]:.6f} {times[-1] * 1e3:.1f} ms",
                  flush=True)
            if report_recovery:
                with open(o.kill_stamp) as f:
                    killed_at = float(f.read())
                print(f"recovered: {time.time() * 1e3 - killed_at:.0f} ms from the kill to the "
                      "end of the first resumed step", flush=True)
        report_recovery = False
        step += 1

    failed = 0
    if reference_losses is not None:
        if len(reference_losses) != len(losses):
            failed += 1
            if p.rank == 0:
                print(f"the reference has {len(reference_losses)} steps, this run {len(losses)}")
        for step, (got, want) in enumerate(zip(losses, reference_losses)):
            if abs(got - want) > o.tolerance * abs(want):
                failed += 1
                if p.rank == 0:
                    print(f"step {step + 1}: loss {got!r} differs from the reference {want!r}")
        if p.rank == 0 and not failed:
            print(f"every step's loss matches the single-process reference "
                  f"(relative {o.tolerance:g})")
    skip = min(2, o.steps - 1)  # warm-up steps
    mean_ms = 1e3 * sum(times[skip:]) / len(times[skip:])
    if p.rank == 0:
        print(f"mean step {mean_ms:.1f} ms ({o.backend}, {placement}; steps {skip + 1}..{o.steps})")
        if o.summary:
            with open(o.summary, "w") as f:
                json.dump({"backend": o.backend, "placement": placement, "mean_step_ms": mean_ms,
                           "losses": losses, "predicted_step_s": g.predicted_step_seconds,
                           "predicted_naive_step_s": g.naive_step_seconds}, f)
    # Every rank's verdict, so that no rank exits 0 while another failed.
    status = torch.tensor([failed])
    p.all_reduce(p.world, status, dist.ReduceOp.MAX)
    p.world.barrier().wait()
    dist.destroy_process_group()
    return 1 if int(status.item()) else 0


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
