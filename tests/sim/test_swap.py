"""The LRU swapper against independent references: replays of traces written by hand and worked out by hand
(which block is evicted, dropped or copied out, fetched again after eviction, prefetched within the window), a
brute-force second implementation of the policy on random tiny traces, the bytes moved conserved over a steady
iteration, the capacity never exceeded (in the replay and on the engine's timeline), the engine running the
copies as stated (a kernel after its swap-ins, a copy-out after the last use, copies beside compute, the host
links shared), and an unlimited GPU moving nothing."""
import dataclasses
import math
import random

import pytest

from tofu.api import load_graph
from tofu.models import ModelOptions
from tofu.sim.engine import Stream, simulate
from tofu.sim.hardware import K80X8, Direction, Link, with_host
from tofu.sim.program import Origin, Phase, Program, Task, TaskKind, Tensor, TensorKind
from tofu.sim.swap import Access, DoesNotFit, Move, Trace, replay, replicate, swap_program, trace_of
from tofu.sim.systems import one_device_program

GB = 1e9
A, F, P, O, D, X, R = Move.ALLOCATE, Move.FETCH, Move.PREFETCH, Move.COPY_OUT, Move.DROP, Move.FREE, Move.RUN


def trace(sizes, persistent, steps):
    return Trace(tuple(sizes), frozenset(persistent), tuple(Access(tuple(r), tuple(w)) for r, w in steps))


def moves(rep):
    return [(e.step, e.move, e.block) for e in rep.events]


# ------------------------------------------------------------------------------------------- worked by hand

def test_lru_evicts_copies_out_dirty_drops_clean_and_fetches_again():
    # w persistent (block 0); a, b, c, d transient (1-4); all of size 1 on a GPU of 3; no prefetching.
    #   0: reads w, writes a    1: reads a, writes b    2: reads b, w, writes c    3: reads a, c, writes d
    #   4: reads d, w
    # The first iteration fetches w; at its end w stays, so the next starts with w alone on the GPU, as does the
    # one after it (steady). Step 2 needs room for c: w and b are its own, a is the least recently used other:
    # dirty (written at 0), so copied out; b is freed after step 2. Step 3 fetches a back (a use after an
    # eviction), then needs room for d: w (clean: fetched, only read) is the least recently used and is dropped;
    # a and c end at step 3. Step 4 fetches w again.
    t = trace([1] * 5, {0}, [([0], [1]), ([1], [2]), ([2, 0], [3]), ([1, 3], [4]), ([4, 0], [])])
    rep = replay(t, 3, window=0)
    assert rep.warmup == 2 and rep.steady and rep.start == (0,) and rep.start_host == frozenset({0})
    assert moves(rep) == [(0, A, 1), (0, R, None), (1, A, 2), (1, R, None),
                          (2, O, 1), (2, A, 3), (2, R, None), (2, X, 2),
                          (3, F, 1), (3, D, 0), (3, A, 4), (3, R, None), (3, X, 1), (3, X, 3),
                          (4, F, 0), (4, R, None), (4, X, 4)]
    assert rep.peak_bytes == 3 and rep.bytes_in == 2 and rep.bytes_out == 1


def test_a_block_written_in_place_is_copied_out_every_time():
    # two persistent blocks each read and written by one operator (an update) on a GPU that holds one
    t = trace([1, 1], {0, 1}, [([0], [0]), ([1], [1])])
    rep = replay(t, 1, window=0)
    assert moves(rep) == [(0, O, 1), (0, F, 0), (0, R, None), (1, O, 0), (1, F, 1), (1, R, None)]


def test_without_a_window_a_cycle_larger_than_the_gpu_misses_every_time():
    # u, v, w read in turn on a GPU that holds two: LRU evicts exactly the block needed next (dropped: clean)
    t = trace([1, 1, 1], {0, 1, 2}, [([0], []), ([1], []), ([2], [])])
    rep = replay(t, 2, window=0)
    assert moves(rep) == [(0, D, 1), (0, F, 0), (0, R, None), (1, D, 2), (1, F, 1), (1, R, None),
                          (2, D, 0), (2, F, 2), (2, R, None)]


def test_the_prefetcher_swaps_in_the_next_operators_block_ahead_of_it():
    # the same cycle with a window of one operator: after each operator the next one's block comes in (the
    # window runs on into the next iteration: after operator 2, operator 0's u), evicting the least recently
    # used block no operator of the window reads; no operator waits for a fetch
    t = trace([1, 1, 1], {0, 1, 2}, [([0], []), ([1], []), ([2], [])])
    rep = replay(t, 2, window=1)
    assert moves(rep) == [(0, R, None), (0, D, 2), (0, P, 1), (1, R, None), (1, D, 0), (1, P, 2),
                          (2, R, None), (2, D, 1), (2, P, 0)]
    assert all(e.move is not F for e in rep.events)


def test_the_prefetcher_walks_a_wider_window_as_the_brute_force_reference_does():
    # window 2 on the 3-cycle, GPU of 2: both blocks the window reads are soon used, so the prefetcher may evict
    # only the block just used
    t = trace([1, 1, 1], {0, 1, 2}, [([0], []), ([1], []), ([2], [])])
    assert moves(replay(t, 2, window=2)) == reference(t, 2, 2)


def test_the_prefetcher_stops_at_the_first_block_it_finds_no_room_for():
    # persistent u (block 0, 1 byte), W (1, 3 bytes), v (2, 2 bytes); transient a (3, 3 bytes), y (4), z (5) of 1
    # byte; a GPU of 7, a window of 2.   0: reads v, writes a    1: reads W, u, v, writes y    2: reads a, writes z
    # The iteration starts with u, v, W (LRU first). Operator 0 needs 2 bytes for a; every other block is soon used
    # (read by operator 1 or 2), so the least recently used go: u, then W (both clean: dropped). The prefetcher then
    # wants W for operator 1: 3 bytes, and only soon-used blocks could go, so the walk ends there: u, 1 byte, which
    # would fit, is not prefetched, and operator 1 fetches both (a, dirty and soon used, is copied out for W).
    # After operator 1, a comes back for operator 2 in place of W (not soon used: the window is operators 2 and
    # the next iteration's 0); after operator 2, W comes back for the next iteration's operator 1.
    t = trace([1, 3, 2, 3, 1, 1], {0, 1, 2}, [([2], [3]), ([1, 0, 2], [4]), ([3], [5])])
    rep = replay(t, 7, window=2)
    assert rep.start == (0, 2, 1)
    assert moves(rep) == [(0, D, 0), (0, D, 1), (0, A, 3), (0, R, None),
                          (1, O, 3), (1, F, 1), (1, F, 0), (1, A, 4), (1, R, None), (1, X, 4), (1, D, 1), (1, P, 3),
                          (2, A, 5), (2, R, None), (2, X, 3), (2, X, 5), (2, P, 1)]


def test_an_operator_larger_than_the_gpu_does_not_fit():
    t = trace([2, 2], {0}, [([0], [1])])
    with pytest.raises(DoesNotFit, match="operator 0 uses 4 bytes"):
        replay(t, 3)


def test_host_memory_limits_the_copies():
    t = trace([1, 1], {0, 1}, [([0], [0]), ([1], [1])])
    assert replay(t, 1, window=0, host_capacity=2).host_peak_bytes == 2
    with pytest.raises(DoesNotFit, match="host memory"):
        replay(t, 1, window=0, host_capacity=1.5)


# --------------------------------------------------------------------------- a second implementation, brute force

def reference(t, capacity, window, max_warmup=4):
    """The policy of tofu.sim.swap's docstring written again plainly: last-use times instead of an ordered dict,
    the window's reads recomputed at every question, the steady state found the same way."""
    n = len(t.steps)
    persistent = t.persistent
    last = {}
    for i, a in enumerate(t.steps):
        for b in a.reads + a.writes:
            if b not in persistent:
                last[b] = i
    st = {"gpu": {}, "dirty": set(), "host": set(persistent), "clock": 0, "tick": 0}

    def touch(b):
        st["tick"] += 1
        st["gpu"][b] = st["tick"]

    def soon(b):
        c = st["clock"]
        for j in range(c + 1, c + window + 1):
            if b in t.steps[j % n].reads and (b in persistent or j // n == c // n):
                return True
        return False

    def used():
        return sum(t.sizes[b] for b in st["gpu"])

    def room(nbytes, pinned, soft, log):
        need = used() + nbytes - capacity
        if need <= 0:
            return True
        order = sorted(st["gpu"], key=lambda b: st["gpu"][b])
        first = [b for b in order if b not in pinned and not soon(b)]
        second = [b for b in order if b not in pinned and soon(b)]
        victims, freed = [], 0
        for b in first + ([] if soft else second):
            if freed >= need:
                break
            victims.append(b)
            freed += t.sizes[b]
        if freed < need:
            if soft:
                return False
            raise DoesNotFit("reference")
        for b in victims:
            del st["gpu"][b]
            if b in st["dirty"]:
                st["dirty"].discard(b)
                st["host"].add(b)
                log.append((st["clock"] % n, O, b))
            else:
                log.append((st["clock"] % n, D, b))
        return True

    def iteration(log):
        for i in range(n):
            a = t.steps[i]
            pinned = set(a.reads) | set(a.writes)
            if sum(t.sizes[b] for b in pinned) > capacity:
                raise DoesNotFit("reference")
            for b in dict.fromkeys(a.reads):
                if b not in st["gpu"]:
                    room(t.sizes[b], pinned, False, log)
                    touch(b)
                    log.append((i, F, b))
            for b in dict.fromkeys(a.writes):
                if b not in st["gpu"]:
                    room(t.sizes[b], pinned, False, log)
                    touch(b)
                    log.append((i, A, b))
            log.append((i, R, None))
            for b in dict.fromkeys(a.reads + a.writes):
                touch(b)
            for b in a.writes:
                st["dirty"].add(b)
                st["host"].discard(b)
            for b in sorted(b for b, j in last.items() if j == i):
                del st["gpu"][b]
                st["dirty"].discard(b)
                st["host"].discard(b)
                log.append((i, X, b))
            c = st["clock"]
            stop = False
            for j in range(c + 1, c + window + 1):
                for b in t.steps[j % n].reads:
                    if b in st["gpu"] or b not in st["host"] or (b not in persistent and j // n != c // n):
                        continue
                    if not room(t.sizes[b], set(), True, log):
                        stop = True
                        break
                    touch(b)
                    log.append((i, P, b))
                if stop:
                    break
            st["clock"] += 1

    def state():
        return (tuple(sorted(st["gpu"], key=lambda b: st["gpu"][b])), frozenset(st["dirty"]),
                frozenset(st["host"]))

    previous, warm = None, 0
    while warm < max_warmup and state() != previous:
        previous = state()
        iteration([])
        warm += 1
    log = []
    iteration(log)
    return log


def random_trace(rng):
    persistent = list(range(rng.randint(1, 3)))
    sizes = [rng.randint(1, 3) for _ in persistent]
    written = []
    steps = []
    for _ in range(rng.randint(3, 8)):
        reads = rng.sample(persistent + written, rng.randint(1, min(3, len(persistent + written))))
        writes = []
        if rng.random() < 0.7:
            writes.append(len(sizes))
            sizes.append(rng.randint(1, 3))
        if rng.random() < 0.2:
            writes.append(rng.choice(persistent))
        steps.append((reads, writes))
        written += [w for w in writes if w not in persistent]
    return trace(sizes, persistent, steps)


@pytest.mark.parametrize("seed", range(300))
def test_the_replay_equals_a_brute_force_second_implementation(seed):
    rng = random.Random(seed)
    t = random_trace(rng)
    least = max(sum(t.sizes[b] for b in set(a.reads) | set(a.writes)) for a in t.steps)
    capacity = rng.randint(least, max(least, sum(t.sizes) - 1))
    window = rng.choice([0, 1, 2, 3, 5, 20])
    assert moves(replay(t, capacity, window)) == reference(t, capacity, window)


# ----------------------------------------------------------------------- conservation and capacity, replayed

def check_replay(rep):
    """Replays the events and checks: what the GPU holds never exceeds the capacity and matches the peak; each
    block enters (allocated, fetched) as often as it leaves (copied out, dropped, freed) over a steady iteration;
    a dropped block had a valid host copy; a fetched block was in host memory."""
    t = rep.trace
    on, held, peak = set(rep.start), sum(t.sizes[b] for b in rep.start), 0
    dirty, host = set(rep.start_dirty), set(rep.start_host)
    peak = held
    enter, leave = {}, {}
    for e in rep.events:
        b = e.block
        if e.move in (A, F, P):
            assert b not in on
            if e.move is not A:
                assert b in host
            on.add(b)
            held += t.sizes[b]
            peak = max(peak, held)
            assert held <= rep.capacity
            enter[b] = enter.get(b, 0) + 1
        elif e.move in (O, D, X):
            assert b in on
            if e.move is D:
                assert b not in dirty and b in host
            if e.move is O:
                assert b in dirty
                dirty.discard(b)
                host.add(b)
            if e.move is X:
                dirty.discard(b)
                host.discard(b)
            on.discard(b)
            held -= t.sizes[b]
            leave[b] = leave.get(b, 0) + 1
        else:
            a = t.steps[e.step]
            assert set(a.reads) | set(a.writes) <= on
            dirty |= set(a.writes)
            host -= set(a.writes)
    assert peak == rep.peak_bytes
    if rep.steady:
        assert on == set(rep.start) and dirty == set(rep.start_dirty) and host == set(rep.start_host)
        for b in set(enter) | set(leave):
            assert enter.get(b, 0) == leave.get(b, 0)
        assert rep.moved(A, F, P) == rep.moved(O, D, X)


@pytest.mark.parametrize("seed", range(60))
def test_random_replays_conserve_blocks_and_respect_the_capacity(seed):
    rng = random.Random(1000 + seed)
    t = random_trace(rng)
    least = max(sum(t.sizes[b] for b in set(a.reads) | set(a.writes)) for a in t.steps)
    check_replay(replay(t, rng.randint(least, sum(t.sizes)), rng.choice([0, 1, 4, 100])))


def one_device(model, batch):
    return one_device_program(load_graph(model, ModelOptions(batch=batch)))


PROGRAMS = [("mlp", 32), ("rnn-tiny", 16), ("wresnet-tiny", 8)]


@pytest.fixture(scope="module")
def programs():
    return {m: one_device(m, b) for m, b in PROGRAMS}


def peak_alone(program):
    return simulate(program, K80X8).peak_bytes[0]


@pytest.mark.parametrize("model", [m for m, _ in PROGRAMS])
@pytest.mark.parametrize("fraction", [0.5, 0.8])
def test_real_programs_conserve_bytes_and_respect_the_capacity_on_the_timeline(programs, model, fraction):
    program = programs[model]
    t = trace_of(program)
    capacity = max(fraction * peak_alone(program),
                   max(sum(t.sizes[b] for b in set(a.reads) | set(a.writes)) for a in t.steps))
    rep = replay(t, capacity)
    check_replay(rep)
    assert rep.bytes_in > 0
    hosted = with_host(K80X8)
    swapped = replicate(swap_program(program, rep, hosted.host(0)), hosted, 2)
    out = simulate(swapped.program, hosted)
    assert swapped.peak_bytes(out) <= capacity
    # the host copies: bytes into each GPU over its links equal what the replay swapped in, out likewise
    links = dict(out.link_bytes)
    for r in range(2):
        assert links[Link("die", r, Direction.DOWN)] == pytest.approx(rep.bytes_in)
        assert links[Link("die", r, Direction.UP)] == pytest.approx(rep.bytes_out)
    assert links[Link("host", 0, Direction.DOWN)] == pytest.approx(2 * rep.bytes_in)
    check_dependencies(swapped.program, out)


def check_dependencies(program, out):
    """A kernel starts after the swap-ins of what it reads or writes in place; a copy-out after every task that
    used its block; nothing starts before its dependencies end."""
    spans = out.spans
    for t in program.tasks:
        assert all(spans[d].end <= spans[t.id].start + 1e-12 for d in t.deps)
        if t.kind is not TaskKind.COPY:
            for r in t.reads + t.writes:                     # a block written in place: after its swap-in
                p = program.tensors[r].producer
                if p is not None and p != t.id:
                    assert spans[p].end <= spans[t.id].start + 1e-12
    readers = program.readers
    for t in program.tasks:
        if t.op == "swap_out":
            (r,) = t.reads
            p = program.tensors[r].producer
            users = [u for u in readers[r] if u < t.id] + ([p] if p is not None else [])
            assert all(spans[u].end <= spans[t.id].start + 1e-12 for u in users)


def test_an_unlimited_gpu_moves_nothing_and_runs_as_the_program_alone(programs):
    program = programs["rnn-tiny"]
    rep = replay(trace_of(program), math.inf)
    assert rep.bytes_in == rep.bytes_out == 0 and set(rep.start) >= trace_of(program).persistent
    hosted = with_host(K80X8)
    swapped = replicate(swap_program(program, rep, hosted.host(0)), hosted, 8)
    assert not [t for t in swapped.program.tasks if t.kind is TaskKind.COPY]
    assert simulate(swapped.program, hosted).seconds == pytest.approx(simulate(program, K80X8).seconds, rel=1e-12)


def test_copies_overlap_compute(programs):
    program = programs["wresnet-tiny"]
    rep = replay(trace_of(program), 0.5 * peak_alone(program))
    hosted = with_host(K80X8)
    swapped = swap_program(program, rep, hosted.host(0))
    out = simulate(swapped.program, hosted)
    assert out.overlapped_seconds[0] > 0
    copies = [s for t, s in zip(swapped.program.tasks, out.spans) if t.kind is TaskKind.COPY]
    assert copies and all(s.stream is Stream.COPY for s in copies)
    assert {s.device for t, s in zip(swapped.program.tasks, out.spans) if t.op == "swap_in"} == {hosted.host(0)}
    assert {t.origin for t in swapped.program.tasks if t.kind is TaskKind.COPY} == {Origin.SWAP}


# ------------------------------------------------------------------------------------------- the host links

def host_copies(devices, nbytes):
    """One copy of ``nbytes`` from each of ``devices`` to its host memory on k80x8."""
    hosted = with_host(K80X8)
    tasks, tensors = [], []
    for d in devices:
        tensors.append(Tensor(len(tensors), d, nbytes, TensorKind.ACTIVATION))
        tensors.append(Tensor(len(tensors), hosted.host(d), nbytes, TensorKind.ACTIVATION, len(tasks)))
        tasks.append(Task(len(tasks), TaskKind.COPY, Phase.FORWARD, Origin.SWAP, "swap_out", d, hosted.host(d), None,
                          0.0, float(nbytes), (), (len(tensors) - 2,), (len(tensors) - 1,)))
    return simulate(Program(2 * K80X8.devices, tuple(tasks), tuple(tensors)), hosted)


def test_the_host_link_of_a_quad_is_shared_by_its_four_dies():
    latency = with_host(K80X8).copy_launch
    # four dies of one quad: 10 GB/s shared four ways, 2.5 GB/s each: 10 GB take 4 s
    assert [s.end for s in host_copies([0, 1, 2, 3], 10 * GB).spans] == pytest.approx([latency + 4.0] * 4)
    # one die of each quad: each alone on its host link at 10 GB/s (its die and board links carry 21)
    assert [s.end for s in host_copies([0, 4], 10 * GB).spans] == pytest.approx([latency + 1.0] * 2)


def test_host_routes():
    hosted = with_host(K80X8)
    assert hosted.devices == 16 and hosted.host(3) == 11 and hosted.copy_engines == 1
    assert [str(x) for x in hosted.route(3, 11)] == ["die3.up", "pair1.up", "host0.up"]
    assert [str(x) for x in hosted.route(13, 5)] == ["host1.down", "pair2.down", "die5.down"]
    assert hosted.route(0, 6) == K80X8.route(0, 6)
    with pytest.raises(ValueError, match="no host path"):
        with_host(dataclasses.replace(K80X8, name="nameless"))
