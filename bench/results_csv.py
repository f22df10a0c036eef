"""What the emulation scripts (multi-nic.sh, two-islands.sh) share for -o DIR: one CSV that
several invocations add their rows to."""
import csv
import os
import sys


def append_rows(path, fields, rows, tool):
    """Adds `rows` (dicts over `fields`) to the CSV at `path`, its header first where the file is
    new. A file with other columns is refused (exits, naming `tool`), not mixed."""
    fresh = not os.path.exists(path)
    if not fresh:
        with open(path) as f:
            if next(csv.reader(f), []) != fields:
                sys.exit(f"{tool}: {path} has other columns: remove it or take another -o")
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        if fresh:
            writer.writeheader()
        writer.writerows(rows)
