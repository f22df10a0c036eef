#!/usr/bin/python3
"""One column of a CSV against another, a line or a group of bars per series.

    bench/plot_table.py TABLE.csv OUT.png --x COL --y COL [--label FORMAT] [--bars]
                        [--logx] [--where COL=VALUE ...] [--hline Y=LABEL ...] [--diagonal]
                        [--title TEXT] [--xlabel TEXT] [--ylabel TEXT]

The emulation scripts (bench/emulate/long-haul.sh, multi-nic.sh, two-islands.sh) write their
results as CSV with -o DIR and draw them with this: busbw over the bound against the RTT, busbw
per run, predicted time against measured. Rows with the same --x value and series are drawn as
their median. --label names a row's series (a line, or a bar's colour) from its columns, as
Python's str.format does ("{collective}, {gbit_per_host} Gbit/s"): rows of one label are one
series (default: one series, named after --y); --bars puts the --x values side by side as categories, in the order they first appear; --logx a
log axis; --where keeps the rows whose column has that value; --hline a dashed horizontal line
(a bound, a target); --diagonal the line y = x with a band of +-25% (predicted against measured).
Needs python3-matplotlib (Debian); draws without a display (Agg).
"""
import argparse
import csv
import statistics
import string
import sys

from plotting import pyplot


def number(text, what):
    try:
        return float(text)
    except ValueError:
        raise SystemExit(f"plot_table: {what} is not a number: {text!r}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("csv")
    parser.add_argument("png")
    parser.add_argument("--x", required=True)
    parser.add_argument("--y", required=True)
    parser.add_argument("--label", default="")
    parser.add_argument("--bars", action="store_true")
    parser.add_argument("--logx", action="store_true")
    parser.add_argument("--where", action="append", default=[], metavar="COL=VALUE")
    parser.add_argument("--hline", action="append", default=[], metavar="Y=LABEL")
    parser.add_argument("--diagonal", action="store_true")
    parser.add_argument("--title", default="")
    parser.add_argument("--xlabel")
    parser.add_argument("--ylabel")
    args = parser.parse_args()
    plt = pyplot("plot_table")
    if plt is None:
        return 1

    filters = []
    for item in args.where:
        column, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"plot_table: --where wants COL=VALUE, not {item!r}")
        filters.append((column, value))
    with open(args.csv) as f:
        reader = csv.DictReader(f)
        named = {f for _, f, _, _ in string.Formatter().parse(args.label) if f}
        wanted = {args.x, args.y, *named, *(c for c, _ in filters)}
        missing = wanted - set(reader.fieldnames or [])
        if missing:
            raise SystemExit(f"plot_table: {args.csv} lacks the columns {sorted(missing)}")
        rows = [r for r in reader if all(r[c] == v for c, v in filters)]
    if not rows:
        raise SystemExit(f"plot_table: {args.csv} has no rows to draw")

    # series -> x -> [y]; categories in the order they first appear.
    points = {}
    categories = []
    for row in rows:
        name = args.label.format(**row) if args.label else args.y
        x = row[args.x] if args.bars else number(row[args.x], f"{args.x} in {args.csv}")
        if args.bars and x not in categories:
            categories.append(x)
        points.setdefault(name, {}).setdefault(x, []).append(
            number(row[args.y], f"{args.y} in {args.csv}"))

    fig, ax = plt.subplots(figsize=(8, 5))
    if args.bars:
        width = 0.8 / len(points)
        for i, (name, by_x) in enumerate(points.items()):
            xs = [k for k, c in enumerate(categories) if c in by_x]
            ys = [statistics.median(by_x[categories[k]]) for k in xs]
            bars = ax.bar([k - 0.4 + width * (i + 0.5) for k in xs], ys, width, label=name)
            ax.bar_label(bars, fmt="%.3g", fontsize=7)
        ax.set_xticks(range(len(categories)))
        # Long names side by side would run into each other: slanted then.
        slanted = sum(len(c) for c in categories) > 60
        ax.set_xticklabels(categories, rotation=20 if slanted else 0,
                           ha="right" if slanted else "center")
    else:
        markers = "os^vD<>p*hX"
        for i, (name, by_x) in enumerate(points.items()):
            xs = sorted(by_x)
            # Predicted against measured: a point per run, not a line through them.
            ax.plot(xs, [statistics.median(by_x[x]) for x in xs],
                    marker=markers[i % len(markers)], label=name,
                    linestyle="none" if args.diagonal else "-")
        if args.logx:
            ax.set_xscale("log")
    if args.diagonal:
        top = max(max(max(v) for v in by_x.values()) for by_x in points.values())
        top = max(top, max(max(by_x) for by_x in points.values())) * 1.1
        ax.plot([0, top], [0, top], color="gray", linestyle="--", label="y = x")
        ax.fill_between([0, top], [0, 0.75 * top], [0, 1.25 * top], color="gray", alpha=0.15,
                        label="within 25%")
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
    for item in args.hline:
        y, _, label = item.partition("=")
        ax.axhline(number(y, "--hline"), color="gray", linestyle="--", linewidth=1)
        if label:
            ax.annotate(label, (0.01, number(y, "--hline")), xycoords=("axes fraction", "data"),
                        textcoords="offset points", xytext=(0, 3), fontsize=8, color="dimgray")
    if not args.diagonal:
        # Room above the tallest bar or line, and above any --hline with its label; bars keep
        # the top quarter free for the legend.
        lines = [number(item.partition("=")[0], "--hline") for item in args.hline]
        tallest = max([max(max(v) for v in by_x.values()) for by_x in points.values()] + lines)
        ax.set_ylim(bottom=0, top=tallest * (1.35 if args.bars else 1.12))
    ax.set_xlabel(args.xlabel or args.x)
    ax.set_ylabel(args.ylabel or args.y)
    ax.set_title(args.title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
