#!/usr/bin/python3
"""Plots a holmes-sim --sweep CSV: tokens/s per GPU against the inter-island bandwidth, one line
for Holmes's plan and one for the naive placement.

    plot_sweep.py SWEEP.csv OUT.png [TITLE]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # no display here
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(argv[1])))
    if not rows:
        sys.exit(f"{argv[1]}: no rows")
    rows.sort(key=lambda r: float(r["inter_island_gbit"]))
    gbit = [float(r["inter_island_gbit"]) for r in rows]
    holmes = [float(r["holmes_tokens_per_gpu"]) for r in rows]
    naive = [float(r["naive_tokens_per_gpu"]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.plot(gbit, holmes, "o-", label="Holmes placement")
    ax.plot(gbit, naive, "s--", label="naive (Megatron-LM order, one network)")
    ax.set_xscale("log")
    ax.set_xlabel("inter-island bandwidth per host (Gbit/s)")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_ylim(bottom=0)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    ax.set_title(argv[3] if len(argv) > 3 else "holmes-sim sweep")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=120)
    print(f"wrote {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
