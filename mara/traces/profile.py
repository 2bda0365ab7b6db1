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
        """``add_plan`` then ``merge`` (the same breakpoints and counts; the profile must be merged, ``starts``
        non-decreasing). A merged profile only changes where the plan's GPU count changes: the counts between two such
        times move together, so only the breakpoints at those times (and an old first one) can equal their left
        neighbour."""
        ets, eds = [], []  # times where the plan's signed count changes, and by how much
        level = 0
        n = len(starts)
        for i in range(n):
            s0 = starts[i]
            if s0 >= end:
                break
            if i + 1 < n and starts[i + 1] == s0:  # an empty segment
                continue
            g = sign * gpus[i]
            if g != level:
                ets.append(s0)
                eds.append(g - level)
                level = g
        if level:
            ets.append(end)
            eds.append(-level)
        if not ets:
            return
        times, free = self.times, self.free
        first = times[0]
        at = []  # index of each event time, made a breakpoint (inserting later ones never moves earlier ones)
        for t in ets:
            k = bisect_left(times, t)
            if k == len(times) or times[k] != t:
                times.insert(k, t)
                free.insert(k, free[k - 1] if k > 0 else free[0])
            at.append(k)
        cum = 0
        for m in range(len(ets) - 1):  # the changes sum to zero after the last one
            cum += eds[m]
            a, b = at[m], at[m + 1]
            if cum and b > a:
                free[a:b] = [v + cum for v in free[a:b]]
        if ets[0] < first:  # the old first breakpoint may now repeat the count before it
            at.append(bisect_left(times, first))
            at.sort()
        done = -1
        for k in reversed(at):
            if k != done and k > 0 and free[k] == free[k - 1]:
                del times[k], free[k]
            done = k

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
