"""What the plot scripts (plot_busbw.py, plot_table.py) share: matplotlib without a display."""
import sys


def pyplot(tool):
    """matplotlib.pyplot drawing to files (Agg), or None after saying on stderr, as `tool`, that
    matplotlib is missing and which Debian package has it."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"{tool}: matplotlib is missing (apt-get install python3-matplotlib)",
              file=sys.stderr)
        return None
    return plt
