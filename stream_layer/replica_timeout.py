"""How long a replica may take to make an append durable before it counts as failed (§2
"Append protocol": a slow or frozen node is a failed one; gray failures are sealed away, not
waited out).

Contract: `AdaptiveTimeout.timeout_s(nbytes)` is

    clamp(multiple * baseline, min, max) + nbytes / bytes_per_s

where `baseline` is the median, over the paths observed lately (one per replica: a primary's
own journal and each secondary it forwards to; or one per primary, at the client), of each
path's recent high percentile. A path not observed in the last RECENT_OBSERVATIONS
observations (of any path) does not vote: it is a replica no longer written to (its extent
sealed away from it, say a frozen one), and the latencies it kept (the freeze's) would hold
the timeout at its maximum, where a +200 ms disk is never late. The median, not the worst:
a slow replica must not teach the timeout that slow is normal, or a slow disk would never be
sealed away; while a whole machine that is slow lifts every path and the timeout with them.
Until some path has enough samples the timeout is `max` (a cold start is not a gray
failure). The byte allowance keeps a large
append from looking like a slow replica.

Pure: callers pass the latencies they measured (on their injected clock); nothing here reads
the time or does I/O.
"""

from __future__ import annotations

from collections import OrderedDict, deque

# Samples one path keeps, how many a percentile needs, and how often it is recomputed:
# sorting 256 floats on every append would cost more than the append.
WINDOW_SAMPLES = 256
SAMPLES_MIN = 16
REFRESH_EVERY = 32
# Paths remembered (one per replica seen); the least recently observed goes first.
PATHS_MAX = 64
# A path votes in the baseline while it was observed within this many observations (of all
# paths): about 170 appends of a primary with two secondaries.
RECENT_OBSERVATIONS = 512


class LatencyWindow:
    """The last WINDOW_SAMPLES latencies of one path and a high percentile of them."""

    def __init__(self, quantile: float) -> None:
        self.quantile = quantile
        self._samples: deque[float] = deque(maxlen=WINDOW_SAMPLES)
        self._since_refresh = 0
        self.high: float | None = None  # None until SAMPLES_MIN samples
        self.last_seen = 0  # the observer's count of observations when this path was last seen

    def observe(self, seconds: float) -> bool:
        """Add a sample; True when the percentile was recomputed."""
        self._samples.append(seconds)
        self._since_refresh += 1
        if len(self._samples) < SAMPLES_MIN:
            return False
        if self.high is not None and self._since_refresh < REFRESH_EVERY:
            return False
        self._since_refresh = 0
        ordered = sorted(self._samples)
        self.high = ordered[min(len(ordered) - 1, int(self.quantile * len(ordered)))]
        return True


class AdaptiveTimeout:
    """The per-replica timeout of the module docstring, for one observer (an extent node's
    primaries, or a stream client's appends)."""

    def __init__(self, min_s: float, max_s: float, multiple: float, bytes_per_s: float,
                 quantile: float = 0.99) -> None:
        if not 0 < min_s <= max_s:
            raise ValueError("a replica timeout needs 0 < min <= max")
        self.min_s = min_s
        self.max_s = max_s
        self.multiple = multiple
        self.bytes_per_s = bytes_per_s
        self.quantile = quantile
        self._paths: OrderedDict[str, LatencyWindow] = OrderedDict()
        self._base_s = max_s
        self._observed = 0  # observations so far, of every path

    def observe(self, path: str, seconds: float) -> None:
        """`path` made an append durable `seconds` after it was sent."""
        window = self._paths.get(path)
        if window is None:
            window = self._paths[path] = LatencyWindow(self.quantile)
            if len(self._paths) > PATHS_MAX:
                self._paths.popitem(last=False)
        else:
            self._paths.move_to_end(path)
        self._observed += 1
        window.last_seen = self._observed
        if window.observe(seconds):
            self._recompute()

    def _recompute(self) -> None:
        recent = self._observed - RECENT_OBSERVATIONS
        highs = sorted(w.high for w in self._paths.values()
                       if w.high is not None and w.last_seen > recent)
        if not highs:
            return
        baseline = highs[(len(highs) - 1) // 2]  # the lower median: a slow path is outvoted
        self._base_s = min(self.max_s, max(self.min_s, self.multiple * baseline))

    def timeout_s(self, nbytes: int = 0) -> float:
        """How long an append of `nbytes` may wait for one replica."""
        return self._base_s + nbytes / self.bytes_per_s

    def baseline_s(self) -> float:
        """The timeout of an empty append (for logs and tests)."""
        return self._base_s
