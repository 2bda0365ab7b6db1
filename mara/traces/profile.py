"""A step function of free GPUs over future time: breakpoints ``times`` (sorted) and the free count from each."""

from __future__ import annotations

from bisect import bisect_left, bisect_right


class FreeProfile:
    """Free GPUs ``free[k]`` over ``[times[k], times[k+1])``; the last value holds for ever."""

    __slots__ = ("free", "times")

    def __init__(self, now: int, n: int):
        self.times = [now]
        self.free = [n]

    def copy(self) -> FreeProfile:
        p = FreeProfile.__new__(FreeProfile)
        p.times, p.free = list(self.times), list(self.free)
        return p

    def at(self, t) -> int:
        """Free GPUs at time t (t >= the first breakpoint)."""
        return self.free[max(bisect_right(self.times, t) - 1, 0)]

    def point(self, t) -> int:
        """Make t a breakpoint (value unchanged); its index."""
        k = bisect_left(self.times, t)
        if k < len(self.times) and self.times[k] == t:
            return k
        self.times.insert(k, t)
        self.free.insert(k, self.free[k - 1] if k > 0 else self.free[0])
        return k

    def add(self, t0, t1, g: int) -> None:
        """Add g free GPUs over [t0, t1) (negative g: reserve them)."""
        if t1 <= t0 or g == 0:
            return
        a = self.point(t0)
        b = self.point(t1)
        for k in range(a, b):
            self.free[k] += g

    def add_plan(self, starts, gpus, end, sign: int) -> None:
        """Add (sign +1) or reserve (sign -1) a plan: ``gpus[i]`` from ``starts[i]`` to the next start or ``end``."""
        for i, (s, g) in enumerate(zip(starts, gpus)):
            e = starts[i + 1] if i + 1 < len(starts) else end
            if g:
                self.add(s, min(e, end), sign * g)

    def apply_plan(self, starts, gpus, end, sign: int) -> None:
        """``add_plan`` then ``merge`` in one sweep (the same breakpoints and counts; the profile must be merged)."""
        ev: dict = {}
        n = len(starts)
        for i in range(n):
            g = gpus[i]
            if not g:
                continue
            s0 = starts[i]
            e = starts[i + 1] if i + 1 < n and starts[i + 1] < end else end
            if e <= s0:
                continue
            d = sign * g
            ev[s0] = ev.get(s0, 0) + d
            ev[e] = ev.get(e, 0) - d
        if not ev:
            return
        times, free = self.times, self.free
        ets = sorted(ev)
        ne = len(ets)
        # only [first event, last event] changes: the deltas sum to zero after the last one
        i = bisect_left(times, ets[0])
        stop = bisect_right(times, ets[-1])
        out_t, out_f = times[:i], free[:i]
        base = free[i - 1] if i > 0 else free[0]
        cum, k = 0, 0
        while i < stop or k < ne:
            if k >= ne or (i < stop and times[i] <= ets[k]):
                t = times[i]
                base = free[i]
                i += 1
                if k < ne and ets[k] == t:
                    cum += ev[t]
                    k += 1
            else:
                t = ets[k]
                cum += ev[t]
                k += 1
            v = base + cum
            if not out_f or v != out_f[-1]:
                out_t.append(t)
                out_f.append(v)
        if stop < len(times):
            first = stop + 1 if free[stop] == out_f[-1] else stop
            out_t.extend(times[first:])
            out_f.extend(free[first:])
        self.times, self.free = out_t, out_f

    def breakpoints(self, lo, hi) -> list:
        """Breakpoints in [lo, hi)."""
        return self.times[bisect_left(self.times, lo) : bisect_left(self.times, hi)]

    def merge(self) -> None:
        """Drop breakpoints that do not change the free count (the first one stays)."""
        t, f = [self.times[0]], [self.free[0]]
        for x, v in zip(self.times[1:], self.free[1:]):
            if v != f[-1]:
                t.append(x)
                f.append(v)
        self.times, self.free = t, f
