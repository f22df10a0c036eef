"""Backend holmes on CUDA tensors (a GPU machine: bench/gpu-check.sh runs it under holmes-run
-n N --torch). Every op's result against a reference computed here; work queued on the current
stream before a collective is seen by it, and work queued after wait() sees its result."""

import sys

import torch
import torch.distributed as dist

import holmes.torch  # noqa: F401


def main():
    if not torch.cuda.is_available():
        print("cuda_check: no CUDA device (torch.cuda.is_available() is False)")
        return 2
    dist.init_process_group("holmes")
    rank, size = dist.get_rank(), dist.get_world_size()
    dev = torch.device("cuda", 0)
    failures = []

    def check(name, got, want):
        if not torch.equal(got.cpu(), want.cpu()):
            failures.append(name)

    n = 1 << 20
    base = torch.arange(n, dtype=torch.float32, device=dev) % 7
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.int32):
        x = (base + rank).to(dtype)
        dist.all_reduce(x)
        check(f"all_reduce {dtype}", x, (base * size + sum(range(size))).to(dtype))
    # Stream order: the kernel that fills y is queued, not finished, when all_reduce is called.
    y = torch.empty(n, device=dev)
    y.fill_(float(rank + 1))
    work = dist.all_reduce(y, async_op=True)
    work.wait()
    z = y * 2  # queued after wait(): sees the result
    check("stream order", z, torch.full((n,), 2.0 * sum(range(1, size + 1)), device=dev))
    b = torch.full((1000,), float(rank), device=dev)
    dist.broadcast(b, src=size - 1)
    check("broadcast", b, torch.full((1000,), float(size - 1)))
    out = torch.empty(size * 100, device=dev)
    dist.all_gather_into_tensor(out, torch.full((100,), float(rank), device=dev)) \
        if hasattr(dist, "all_gather_into_tensor") else \
        dist._all_gather_base(out, torch.full((100,), float(rank), device=dev))
    check("all_gather_into_tensor", out,
          torch.arange(size, dtype=torch.float32).repeat_interleave(100))
    rs = torch.empty(100, device=dev)
    full = torch.ones(size * 100, device=dev) * (rank + 1)
    (dist.reduce_scatter_tensor if hasattr(dist, "reduce_scatter_tensor")
     else dist._reduce_scatter_base)(rs, full)
    check("reduce_scatter_tensor", rs, torch.full((100,), float(sum(range(1, size + 1)))))
    dist.destroy_process_group()
    if failures:
        print(f"cuda_check rank {rank}: FAILED {failures}")
        return 1
    print(f"cuda_check rank {rank}: every op on CUDA tensors exact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
