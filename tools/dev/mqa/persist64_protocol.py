#!/usr/bin/env python3
"""A model of the 64-head sparse MQA kernel's persistent grid (kernels_src/sparse_mqa/sm90_persist.cuh), run under random
schedules: the producer filling a two-slot ring numbered across the block's items, warpgroup 0 (S, softmax, P V of the left
half, Q's loads) and warpgroup 1 (P V of the right half) meeting on a named barrier per tile and one per item, mbarriers with
parity waits as PTX defines them (try_wait.parity P passes once the phase of parity P has completed, i.e. while the current
phase's parity is not P), named barriers as generations of 256 threads (both warpgroups).

Checked per schedule: stale reads (a tile, Q, the rescale factors or the row sums read before the value meant for that read
was written), overwrites under a reader (a slot refilled, Q reloaded, factors or row sums rewritten while still to be
read), deadlocks (no actor can move, work left). Items have 0 to 3 tiles (0: a row with no valid key), so items without tiles
follow one another too. MUTANTS: the same protocol with one piece taken away (one row-sum buffer, one factor buffer, Q's load
issued before the item's last S), each of which must fail somewhere: the model can see what it claims to check.

usage: persist64_protocol.py [SCHEDULES] [SEED]     (exit status 1 where the kernel's form fails or a mutant passes)
"""
import random
import sys

from persist_protocol import SPIN, Barrier as MBarrier  # the 16-head model's mbarrier (parity waits as PTX defines them)


class NamedBarrier:  # bar.sync of both warpgroups
    def __init__(self):
        self.arrived, self.generation = 0, 0

    def arrive(self):
        g = self.generation
        self.arrived += 1
        if self.arrived == 2:
            self.arrived, self.generation = 0, g + 1
        return g

    def passed(self, g):
        return self.generation > g


def simulate(items, rng, lsum_bufs=2, alpha_bufs=2, early_q=False):
    """One random schedule over the block's items (tile counts); returns a list of failure kinds (empty: clean)."""
    full = [MBarrier(1) for _ in range(2)]
    empty = [MBarrier(2) for _ in range(2)]  # both warpgroups release every tile
    qfull = MBarrier(1)
    bar_p = [NamedBarrier(), NamedBarrier()]
    bar_end = NamedBarrier()
    slot = [None, None]          # the block tile g a slot holds
    slot_readers = [set(), set()]
    q = [None]                   # the item whose Q is loaded
    q_readers = [0]
    alpha = [None] * alpha_bufs  # the tile whose factors a buffer holds
    alpha_pending = [None] * alpha_bufs  # a tile whose factors warpgroup 1 has yet to read
    lsum = [None] * lsum_bufs
    lsum_pending = [None] * lsum_bufs
    fails = []
    first = [sum(items[:k]) for k in range(len(items))]

    def producer():
        g = 0
        for n in items:
            for _ in range(n):
                s, use = g % 2, g // 2
                while use > 0 and not empty[s].passes((use - 1) & 1):
                    yield SPIN
                if slot_readers[s]:
                    fails.append("slot overwritten under a reader")
                slot[s] = g
                yield
                full[s].arrive()
                g += 1
                yield

    def load_q(k):
        if q_readers[0]:
            fails.append("Q reloaded under S")
        q[0] = k
        qfull.arrive()

    def wg0():
        load_q(0)
        yield
        for k, n in enumerate(items):
            while not qfull.passes(k & 1):
                yield SPIN
            if q[0] != k:
                fails.append("stale Q")
            more = k + 1 < len(items)
            if n == 0 and more:
                load_q(k + 1)
            for t in range(n):
                g = first[k] + t
                s = g % 2
                while not full[s].passes((g // 2) & 1):
                    yield SPIN
                if slot[s] != g:
                    fails.append("stale tile (warpgroup 0)")
                slot_readers[s].add(0)
                if early_q and t + 1 == n and more:
                    load_q(k + 1)  # mutant: before this S has read Q
                q_readers[0] += 1
                if q[0] != k:
                    fails.append("S read another item's Q")
                yield  # S runs
                q_readers[0] -= 1
                if not early_q and t + 1 == n and more:
                    load_q(k + 1)  # the item's last S is complete
                b = g % alpha_bufs
                if alpha_pending[b] is not None:
                    fails.append("factors overwritten before warpgroup 1 read them")
                alpha[b], alpha_pending[b] = g, g
                yield
                gen = bar_p[g & 1].arrive()
                while not bar_p[g & 1].passed(gen):
                    yield SPIN
                yield  # P V
                slot_readers[s].discard(0)
                empty[s].arrive()
                yield
            b = k % lsum_bufs
            if lsum_pending[b] is not None:
                fails.append("row sums overwritten before warpgroup 1 read them")
            lsum[b], lsum_pending[b] = k, {0, 1}
            yield
            gen = bar_end.arrive()
            while not bar_end.passed(gen):
                yield SPIN
            if lsum[b] != k:
                fails.append("stale row sums (warpgroup 0)")
            lsum_pending[b].discard(0)
            if not lsum_pending[b]:
                lsum_pending[b] = None
            yield

    def wg1():
        for k, n in enumerate(items):
            for t in range(n):
                g = first[k] + t
                s = g % 2
                gen = bar_p[g & 1].arrive()
                while not bar_p[g & 1].passed(gen):
                    yield SPIN
                b = g % alpha_bufs
                if alpha[b] != g:
                    fails.append("stale factors")
                alpha_pending[b] = None
                if slot[s] != g:
                    fails.append("stale tile (warpgroup 1)")
                slot_readers[s].add(1)
                yield  # P V
                slot_readers[s].discard(1)
                empty[s].arrive()
                yield
            gen = bar_end.arrive()
            while not bar_end.passed(gen):
                yield SPIN
            b = k % lsum_bufs
            yield  # the read may come late
            if lsum[b] != k:
                fails.append("stale row sums (warpgroup 1)")
            if lsum_pending[b] is not None:
                lsum_pending[b].discard(1)
                if not lsum_pending[b]:
                    lsum_pending[b] = None
            yield

    actors = [producer(), wg0(), wg1()]
    live = list(range(3))
    spins = 0
    while live:
        i = rng.choice(live)
        try:
            r = next(actors[i])
        except StopIteration:
            live.remove(i)
            spins = 0
            continue
        spins = spins + 1 if r is SPIN else 0
        if spins > 200 * len(live):
            fails.append("deadlock")
            break
    return fails


def run(schedules, seed, **form):
    rng = random.Random(seed)
    counts = {}
    for _ in range(schedules):
        items = [rng.choice([0, 0, 1, 2, 3]) for _ in range(rng.randint(1, 6))]
        for f in set(simulate(items, rng, **form)):
            counts[f] = counts.get(f, 0) + 1
    return counts


def main():
    schedules = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    bad = False
    for name, form, expect_clean in [("kernel (sm90_persist.cuh)", {}, True), ("mutant: one row-sum buffer", {"lsum_bufs": 1}, False),
                                     ("mutant: one factor buffer", {"alpha_bufs": 1}, False),
                                     ("mutant: Q loaded before the last S", {"early_q": True}, False)]:
        counts = run(schedules, seed, **form)
        clean = not counts
        print(f"{name}: {schedules} schedules, " + (", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "clean"))
        bad |= clean != expect_clean
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
