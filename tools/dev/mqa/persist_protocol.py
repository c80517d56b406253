#!/usr/bin/env python3
"""A model of the persistent sparse MQA kernel's barrier protocol (kernels_src/sparse_mqa/sm90_t_persist.cuh), run under
random schedules: one in-order producer filling two slots, two math warpgroups taking tile t of each token (t % 2), mbarriers
with parity waits as PTX defines them (try_wait.parity P passes once the phase of parity P has completed, i.e. while the
current phase's parity is not P: a waiter two phases ahead passes at once).

Forms (the kernel's switches): RING (tile g of the block in slot g % 2, else tile t of each token in slot t % 2), MERGE
(warpgroup 1 hands over through staged / freed barriers and runs ahead, else both meet at every token's end), and the ring's
full barriers: one a slot, or two a slot alternating by use (full_bars, the fix of session 31).

With MERGE, Q's two buffers too (qfull; a load counts as landed when issued, and one issued under a reader of that buffer
as an overwrite). Each step of a random schedule moves one actor; a consumer's tile read spans two steps (wait passed, then slot released), so
the producer may overwrite a slot under a reader. Reported per form: schedules with a stale tile read (the consumer's wait
passed before its tile was gathered), a slot overwritten while read, and deadlocks (no actor can move, work left).

usage: persist_protocol.py [SCHEDULES] [SEED]     (exit status 1 where a form expected safe shows a failure)
"""
import random
import sys


SPIN = "spin"  # what an actor yields while it waits (a step without progress)


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.phase = count, 0, 0  # phase: completed phases

    def arrive(self):
        self.pending += 1
        if self.pending == self.count:
            self.pending, self.phase = 0, self.phase + 1

    def passes(self, parity):
        return (self.phase & 1) != parity


def simulate(tokens, ring, merge, two_full, rng):
    """One random schedule; returns (stale reads, overwrites under a reader, deadlocked)."""
    full = [Barrier(1) for _ in range(2)]
    full_odd = [Barrier(1) for _ in range(2)]
    empty = [Barrier(1) for _ in range(2)]
    staged, freed = Barrier(1), Barrier(1)
    qfull = [Barrier(1), Barrier(1)]  # MERGE: Q buffer b loaded (warpgroup 0 loads token k + 1's at token k's start)
    qbuf, qreaders = [None, None], [0, 0]
    meet = Barrier(2)  # MERGE 0: the 256-thread barrier at a token's end
    content = [None, None]  # the tile g a slot holds
    readers = [0, 0]
    stale = overwrite = 0

    def full_bars(use):
        return full_odd if ring and two_full and (use & 1) else full

    def use_phase(use):
        return ((use >> 1) if ring and two_full else use) & 1

    def producer():
        nonlocal overwrite
        uses = [0, 0]
        g0 = 0
        for n in tokens:
            for t in range(n):
                slot = (g0 + t) & 1 if ring else t & 1
                u = uses[slot]
                if u > 0:
                    while not empty[slot].passes((u - 1) & 1):
                        yield SPIN
                if readers[slot]:
                    overwrite += 1
                content[slot] = g0 + t
                full_bars(u)[slot].arrive()
                uses[slot] += 1
                yield
            g0 += n

    def load_q(k):
        nonlocal overwrite
        if qreaders[k & 1]:
            overwrite += 1
        qbuf[k & 1] = k
        qfull[k & 1].arrive()

    def warpgroup(wg):
        nonlocal stale
        it = g0 = 0
        if merge and wg == 0 and tokens:
            load_q(0)
        for k, n in enumerate(tokens):
            if merge:
                if wg == 0 and k + 1 < len(tokens):
                    load_q(k + 1)
                while not qfull[k & 1].passes((k >> 1) & 1):
                    yield SPIN
                qreaders[k & 1] += 1
                if qbuf[k & 1] != k:
                    stale += 1
            for t in range(wg, n, 2):
                g = g0 + t
                slot, use = ((g & 1), g >> 1) if ring else (wg, it)
                while not full_bars(use)[slot].passes(use_phase(use)):
                    yield SPIN
                readers[slot] += 1
                if content[slot] != g:
                    stale += 1
                yield  # the tile's math
                readers[slot] -= 1
                empty[slot].arrive()
                it += 1
                yield
            g0 += n
            if merge:
                qreaders[k & 1] -= 1
                if wg == 1:
                    if k > 0:
                        while not freed.passes((k - 1) & 1):
                            yield SPIN
                    staged.arrive()
                else:
                    while not staged.passes(k & 1):
                        yield SPIN
                    yield  # the merge and the store
                    freed.arrive()
            else:
                meet.arrive()
                while not meet.passes(k & 1):
                    yield SPIN
            yield

    actors = [producer(), warpgroup(0), warpgroup(1)]
    live = list(actors)
    spins = 0
    while live:
        a = rng.choice(live)
        try:
            spins = spins + 1 if next(a) is SPIN else 0
        except StopIteration:
            live.remove(a)
            spins = 0
            continue
        if spins > 200:  # 200 steps in a row without progress: every live actor waits for a phase that cannot come
            return stale, overwrite, True
    return stale, overwrite, False


def main():
    schedules = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}, {schedules} schedules a form, tokens of 0-5 tiles (4-12 tokens a block)")
    forms = [  # (name, ring, merge, two full barriers a slot, expected safe)
        ("tile t in slot t % 2 (the runtime's)", False, False, False, True),
        ("merge, tile t in slot t % 2", False, True, False, True),
        ("ring", True, False, False, True),
        ("ring + merge, one full barrier a slot (session 31's first call)", True, True, False, False),
        ("ring + merge, two full barriers a slot (full_bars)", True, True, True, True),
        ("ring, two full barriers a slot", True, False, True, True),
    ]
    bad = 0
    for name, ring, merge, two, safe in forms:
        n_stale = n_over = n_dead = 0
        for _ in range(schedules):
            tokens = [rng.randrange(6) for _ in range(rng.randrange(4, 13))]
            s, o, d = simulate(tokens, ring, merge, two, rng)
            n_stale += s > 0
            n_over += o > 0
            n_dead += d
        failed = n_stale + n_over + n_dead > 0
        print(f"{name:66s} stale reads {n_stale:5d}  overwrites {n_over:5d}  deadlocks {n_dead:5d}  "
              f"{'expected' if failed != safe else 'UNEXPECTED'}")
        bad += failed == safe
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
