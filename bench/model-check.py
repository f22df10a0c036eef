#!/usr/bin/python3
"""The cost model against what runs: holmes-bench allreduce on a layout of ranks, every algorithm
forced and auto, in rounds that interleave them (this machine is noisy: only times of one run
compare). Per size it prints the forced times (medians), what auto chose and its time over the
fastest forced algorithm's, and the model's prediction over the measured time; with -b, auto of a
second build (the one before a change) runs in the same rounds.

The default layout is tests/mp/layout.sh with 6 ranks: 3 emulated hosts of 2 ranks, 2 islands
(shared memory on a host, ucx inside island A, tcp between the islands), all on this machine's
cores, with the link probe on (HOLMES_COST_PROBE=1), as BENCHMARKS.md's "Ranks that share cores".

Usage: bench/model-check.py [-B BUILD] [-b BASE_BUILD] [-r ROUNDS] [-s MIN] [-e MAX] [-n ITERS]
                            [-w WARMUP] [-t SECONDS] [-o DIR]
  -B BUILD   build with bin/holmes-run and bin/holmes-bench (default: $HOLMES_BUILD or ./build)
  -b BASE    a second build whose auto runs beside (its label: "base")
  -r ROUNDS  rounds (default 3); -s, -e: sizes, doubling (default 4K, 16M)
  -n, -w     timed and untimed iterations per size (default 40 and 4)
  -t SECONDS limit of each run (default 300)
  -o DIR     also write DIR/model-check.csv (a row per run and size) and draw it:
             DIR/model-check.png (each run's time over the fastest forced algorithm's, per
             size) and DIR/model-check-model.png (each run's prediction over its time)
"""
import argparse
import collections
import csv
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORCED = ["ring", "rd", "rhd", "hier"]
FIELDS = ["round", "run", "build", "size", "algorithm", "time_us", "predicted_us",
          "predicted_over_time", "over_fastest"]


def significant(x):
    """x to 4 significant digits: a ratio of a slow run's time (0.0189) keeps its precision,
    where 4 decimal places would leave it 0.1% off."""
    return float(f"{x:.4g}")


def die(message):
    sys.exit(f"model-check: {message}")


def parse_args():
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("-B", default=os.environ.get("HOLMES_BUILD", os.path.join(ROOT, "build")))
    p.add_argument("-b")
    p.add_argument("-r", type=int, default=3)
    p.add_argument("-s", default="4K")
    p.add_argument("-e", default="16M")
    p.add_argument("-n", type=int, default=40)
    p.add_argument("-w", type=int, default=4)
    p.add_argument("-t", type=int, default=300)
    p.add_argument("-o")
    p.add_argument("-h", action="store_true")
    args, rest = p.parse_known_args()
    if args.h or rest:
        print(__doc__, file=sys.stderr)
        sys.exit(2 if rest else 0)
    if args.r < 1 or args.n < 1 or args.w < 0 or args.t < 1:
        die("-r, -n and -t want positive numbers, -w zero or more")
    for build in [args.B] + ([args.b] if args.b else []):
        for tool in ["holmes-run", "holmes-bench"]:
            if not os.access(os.path.join(build, "bin", tool), os.X_OK):
                die(f"{build}/bin/{tool} is missing: build it, or name the build with -B/-b")
    return args


def measure(args, build, algo, csv_path):
    """One holmes-bench run of every size; returns its rows."""
    bin_dir = os.path.join(build, "bin")
    env = dict(os.environ, HOLMES_COST_PROBE="1", PATH=bin_dir + os.pathsep + os.environ["PATH"])
    command = [os.path.join(bin_dir, "holmes-run"), "-n", "6", "--",
               os.path.join(ROOT, "tests/mp/layout.sh"), os.path.join(bin_dir, "holmes-bench"),
               "allreduce", "-b", args.s, "-e", args.e, "-f", "2", "-n", str(args.n),
               "-w", str(args.w), "--algo", algo, "--csv", csv_path]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.t)
    except subprocess.TimeoutExpired:
        die(f"{algo} with {build} ran past {args.t} s")
    if done.returncode != 0:
        die(f"{algo} with {build} failed (exit {done.returncode}):\n{done.stdout[-2000:]}"
            f"{done.stderr[-2000:]}")
    with open(csv_path) as f:
        return list(csv.DictReader(f))


def main():
    args = parse_args()
    runs = [(name, args.B, "this") for name in FORCED + ["auto"]]
    if args.b:
        runs.append(("auto-base", args.b, "base"))
    rows = []
    with tempfile.TemporaryDirectory(prefix="holmes-model-check.") as tmp:
        for round_ in range(1, args.r + 1):
            for name, build, label in runs:
                algo = "auto" if name.startswith("auto") else name
                for r in measure(args, build, algo, os.path.join(tmp, f"{round_}-{name}.csv")):
                    rows.append({"round": round_, "run": name, "build": label,
                                 "size": int(r["size"]), "algorithm": r["algorithm"],
                                 "time_us": float(r["time_us"]),
                                 "predicted_us": float(r["predicted_us"]),
                                 "predicted_over_time": significant(
                                     float(r["predicted_us"]) / float(r["time_us"]))})
    fastest = fastest_forced(rows)
    for r in rows:
        r["over_fastest"] = round(r["time_us"] / fastest[r["size"]], 4)
    report(rows, [name for name, _, _ in runs])
    if args.o:
        write(args.o, rows)


def forced_medians(rows, size):
    return {a: statistics.median(r["time_us"] for r in rows if r["run"] == a and r["size"] == size)
            for a in FORCED}


def fastest_forced(rows):
    """Per size, the median time of the fastest forced algorithm."""
    return {size: min(forced_medians(rows, size).values()) for size in {r["size"] for r in rows}}


def report(rows, names):
    times = collections.defaultdict(list)
    for r in rows:
        times[(r["run"], r["size"])].append(r)
    autos = [n for n in names if n.startswith("auto")]
    print("| size | " + " | ".join(FORCED) + " | " +
          " | ".join(f"{n}: chose (x the fastest), pred / time" for n in autos) + " |")
    print("|---" * (1 + len(FORCED) + len(autos)) + "|")
    totals = {n: [0, 0, 0] for n in autos}
    for size in sorted({r["size"] for r in rows}):
        forced = forced_medians(rows, size)
        fastest = min(forced.values())
        cells = [f"**{t:.0f}**" if t == fastest else f"{t:.0f}" for t in forced.values()]
        for name in autos:
            runs = times[(name, size)]
            chosen = collections.Counter(r["algorithm"] for r in runs)
            # The forced time of what auto chose, over the fastest's: where it chose something
            # not forced here (shm), its own time stands in.
            over = [forced.get(r["algorithm"], r["time_us"]) / fastest for r in runs]
            model = [r["predicted_us"] / r["time_us"] for r in runs]
            totals[name][0] += sum(x <= 1.10 for x in over)
            totals[name][1] += sum(abs(m - 1) <= 0.25 for m in model)
            totals[name][2] += len(runs)
            names_ = ", ".join(f"{a} x{c}" if c > 1 else a for a, c in chosen.items())
            cells.append(f"{names_} ({max(over):.2f}), {min(model):.2f}-{max(model):.2f}")
        label = f"{size >> 10} KiB" if size < 1 << 20 else f"{size >> 20} MiB"
        print(f"| {label} | " + " | ".join(cells) + " |")
    for name, (near, close, n) in totals.items():
        print(f"{name}: within 10% of the fastest in {near} of {n} runs; "
              f"prediction within 25% of the time in {close} of {n}")


def write(out_dir, rows):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "model-check.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    # Debian's python3 has matplotlib (python3-matplotlib), whichever python runs this.
    plot = ["/usr/bin/python3", os.path.join(ROOT, "bench/plot_table.py"), path]
    for extra in (
        ["model-check.png", "--x", "size", "--y", "over_fastest", "--logx", "--label", "{run}",
         "--hline", "1=the fastest forced algorithm",
         "--title", "Allreduce, 6 ranks on 3 emulated hosts in 2 islands (medians)",
         "--xlabel", "bytes", "--ylabel", "time / the fastest forced algorithm's"],
        ["model-check-model.png", "--x", "size", "--y", "predicted_over_time", "--logx",
         "--label", "{run}", "--hline", "1=the measured time",
         "--title", "The cost model on shared cores: predicted / measured (medians)",
         "--xlabel", "bytes", "--ylabel", "predicted / measured"],
    ):
        drawn = subprocess.run(plot[:3] + [os.path.join(out_dir, extra[0])] + extra[1:],
                               capture_output=True, text=True)
        if drawn.returncode != 0:
            die(f"could not draw {extra[0]}: {drawn.stderr.strip()}")
    print(f"model-check: wrote {path}, model-check.png and model-check-model.png", file=sys.stderr)


if __name__ == "__main__":
    main()
