"""Progress lines for long work (builds, boots, sweeps).

On a terminal one line is redrawn in place; in a log (CI) a line is printed
at most every `interval` seconds, so the log shows life without flooding.
"""

import sys
import time


class Progress:
    def __init__(self, label, interval=30.0, stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval = interval
        self.start = time.monotonic()
        self.last = 0.0
        self.drawn = False

    def elapsed(self):
        return time.monotonic() - self.start

    def update(self, status, force=False):
        now = time.monotonic()
        line = f"{self.label}: {status} [{self.elapsed():.0f}s]"
        if self.tty:
            self.stream.write("\r\033[K" + line[:200])
            self.stream.flush()
            self.drawn = True
        elif force or now - self.last >= self.interval:
            self.stream.write(line + "\n")
            self.stream.flush()
            self.last = now

    def done(self, status):
        if self.drawn:
            self.stream.write("\r\033[K")
        self.stream.write(f"{self.label}: {status} [{self.elapsed():.0f}s]\n")
        self.stream.flush()


def say(message):
    """A one-off status line on stderr (stdout is kept for results)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
