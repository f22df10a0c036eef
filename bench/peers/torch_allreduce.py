#!/usr/bin/python3
"""torch.distributed allreduce (backend gloo, or holmes) measured in holmes-bench's columns.

    RANK=r WORLD_SIZE=n MASTER_ADDR=A MASTER_PORT=P /usr/bin/python3 torch_allreduce.py \
        [allreduce] [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c] [--csv F] \
        [--backend gloo|holmes]

Measures as allreduce_driver.cpp does for gloo-allreduce-bench and mpi-allreduce-bench: per size,
out of place (the input copied into the output tensor first, since torch reduces in place: that
copy is timed, as a user of torch pays it) then in place; a checked run first (-c: every element
against the exact sum of small integers), warmup, a barrier, the slowest rank's time over -n
iterations. busbw = algbw x 2(n-1)/n; CSV in holmes-bench's format (rank 0). Rank 0's tensors
meet the others through torch's TCPStore at MASTER_ADDR:MASTER_PORT (rank 0 serves it);
GLOO_SOCKET_IFNAME picks the interface; TORCH_TIMEOUT_S (default 120) bounds every operation.
Needs python3-torch (Debian); bench/compare.sh skips this peer when torch is absent.
"""
import argparse
import datetime
import os
import re
import sys
import time


def parse_size(text):
    match = re.fullmatch(r"([0-9.]+)([KkMmGgB]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"bad size {text}")
    scale = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2).upper()]
    return int(float(match.group(1)) * scale)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("collective", nargs="?", default="allreduce", choices=["allreduce"])
    parser.add_argument("-b", "--minbytes", type=parse_size, default=parse_size("32"))
    parser.add_argument("-e", "--maxbytes", type=parse_size, default=parse_size("32M"))
    parser.add_argument("-f", "--stepfactor", type=float, default=2.0)
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("-c", "--check", action="store_true")
    parser.add_argument("--csv", default="")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "holmes"],
                        help="holmes: Holmes's torch.distributed backend (import holmes.torch)")
    args = parser.parse_args()
    if args.stepfactor <= 1.0 or args.iters < 1 or args.warmup < 0:
        parser.error("-f must be > 1, -n >= 1, -w >= 0")

    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("torch_allreduce: python3-torch is not installed", file=sys.stderr)
        return 2
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    timeout = datetime.timedelta(seconds=int(os.environ.get("TORCH_TIMEOUT_S", "120")))
    if args.backend == "holmes":
        import holmes.torch  # noqa: F401 (registers the backend)
    dist.init_process_group(args.backend, init_method="env://", rank=rank, world_size=world,
                            timeout=timeout)
    torch.set_num_threads(1)

    def inputs(r, count):
        # (i * 7 + r * 3) % 9 - 4, as allreduce_driver.cpp: exact in float32 for any order.
        index = torch.arange(count, dtype=torch.int64)
        return ((index * 7 + r * 3) % 9 - 4).to(torch.float32)

    def max_over_ranks(value):
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def sum_over_ranks(value):
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t.item())

    if rank == 0:
        print(f"# torch_allreduce: {world} ranks, dtype float32, op sum, root 0, iters "
              f"{args.iters}, warmup {args.warmup}{', checked' if args.check else ''}")
        print(f"# torch {torch.__version__} torch.distributed {args.backend} all_reduce")
        print(f"# {'size':>12} {'count':>12} {'type':>9} {'redop':>6} {'root':>5}  "
              f"{'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}  "
              f"{'time(us)':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7}")
    rows = []
    size = float(max(args.minbytes, 4))
    while size <= args.maxbytes * 1.0000001:
        count = int(size) // 4
        size *= args.stepfactor
        if count == 0:
            continue
        row = {"size": count * 4, "count": count}
        expected = sum(inputs(r, count) for r in range(world)) if args.check else None
        mine = inputs(rank, count)
        for place in ("", "_inplace"):
            out = torch.empty(count, dtype=torch.float32)

            def once():
                if place == "":
                    out.copy_(mine)  # torch reduces in place: out of place = copy + reduce
                dist.all_reduce(out)

            if place == "_inplace":
                out.copy_(mine)
            wrong = -1
            if args.check:
                once()
                wrong = int(sum_over_ranks(float((out != expected).sum().item())))
            for _ in range(args.warmup):
                once()
            dist.barrier()
            start = time.perf_counter()
            for _ in range(args.iters):
                once()
            seconds = max_over_ranks(time.perf_counter() - start) / args.iters
            algbw = row["size"] / seconds / 1e9
            row.update({f"time_us{place}": seconds * 1e6, f"algbw{place}": algbw,
                        f"busbw{place}": algbw * 2 * (world - 1) / world, f"wrong{place}": wrong})
        rows.append(row)
        if rank == 0:
            print(f"  {row['size']:>12} {count:>12} {'float32':>9} {'sum':>6} {-1:>5}  "
                  f"{row['time_us']:>10.1f} {row['algbw']:>8.3f} {row['busbw']:>8.3f} "
                  f"{row['wrong']:>7}  {row['time_us_inplace']:>10.1f} "
                  f"{row['algbw_inplace']:>8.3f} {row['busbw_inplace']:>8.3f} "
                  f"{row['wrong_inplace']:>7}", flush=True)
    total_wrong = sum(max(0, r["wrong"]) + max(0, r["wrong_inplace"]) for r in rows)
    if rank == 0:
        print(f"# Out of bounds values : {total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}")
        average = sum(r["busbw"] for r in rows) / len(rows) if rows else 0.0
        print(f"# Avg bus bandwidth    : {average:.3f} GB/s", flush=True)
        if args.csv:
            with open(args.csv, "w") as f:
                f.write("collective,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
                        "time_us_inplace,algbw_inplace,busbw_inplace,wrong_inplace,ranks\n")
                for r in rows:
                    f.write(f"allreduce,{r['size']},{r['count']},float32,sum,-1,"
                            f"{r['time_us']:.3f},{r['algbw']:.6f},{r['busbw']:.6f},{r['wrong']},"
                            f"{r['time_us_inplace']:.3f},{r['algbw_inplace']:.6f},"
                            f"{r['busbw_inplace']:.6f},{r['wrong_inplace']},{world}\n")
    dist.destroy_process_group()
    return 0 if total_wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
