#!/usr/bin/python3
"""busbw against message size, one line per library, from bench/compare.sh's compare.csv.

    bench/plot_busbw.py compare.csv busbw.png [--title TEXT] [--inplace]

The CSV needs the columns library, size and busbw (busbw_inplace with --inplace); a column
bound_busbw, when filled, is drawn as a dashed line (the bound the slow tier sets). Sizes go on
a log2 axis labelled 1K, 4K, ...; busbw (decimal GB/s, nccl-tests's definition) on a linear one.
Needs python3-matplotlib (Debian); draws without a display (Agg).
"""
import argparse
import csv
import sys
from collections import defaultdict

from plotting import pyplot


def size_label(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--title", default="allreduce busbw")
    parser.add_argument("--inplace", action="store_true", help="plot the in-place busbw")
    args = parser.parse_args()
    plt = pyplot("plot_busbw")
    if plt is None:
        return 1

    column = "busbw_inplace" if args.inplace else "busbw"
    lines = defaultdict(list)  # library -> [(size, busbw)]
    bound = {}
    with open(args.csv) as f:
        reader = csv.DictReader(f)
        missing = {"library", "size", column} - set(reader.fieldnames or [])
        if missing:
            print(f"plot_busbw: {args.csv} lacks the columns {sorted(missing)}", file=sys.stderr)
            return 1
        for row in reader:
            size = int(row["size"])
            lines[row["library"]].append((size, float(row[column])))
            if row.get("bound_busbw"):
                bound[size] = float(row["bound_busbw"])
    if not lines:
        print(f"plot_busbw: {args.csv} has no rows", file=sys.stderr)
        return 1

    fig, ax = plt.subplots(figsize=(8, 5))
    markers = "os^vD<>p"
    for i, (library, points) in enumerate(lines.items()):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=markers[i % len(markers)],
                label=library)
    if bound:
        sizes = sorted(bound)
        ax.plot(sizes, [bound[s] for s in sizes], linestyle="--", color="gray",
                label="bound of the slow tier")
    sizes = sorted({p[0] for points in lines.values() for p in points})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes])
    ax.minorticks_off()
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel(f"busbw{' (in place)' if args.inplace else ''}, GB/s")
    ax.set_ylim(bottom=0)
    ax.set_title(args.title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
