"""One side of ``tprof ab``: the base commit's pytest process or the head's, and the channel
between them (docs/design.md §18).

The two processes run the same tests in the same order.  At each common test they meet
(:meth:`Pairing.begin`); the base side calibrates and tells the head the rounds it will run
(:meth:`Pairing.plan`); their measured rounds then take turns (:class:`Pacer`) so both sides
see the same machine, round by round; they agree on warm-up together, as a distributed
test's ranks do; and the base hands its rounds to the head (:meth:`Pairing.handoff`), which
judges them as a pair.  A side whose test ended without profiling (skipped, failed at setup,
missing on that side) says so (:meth:`Pairing.end`), and the other runs alone.

The channel is a socket pair the controller (:mod:`tprof_engine.ab`) creates: a side that
dies closes it, so the other never waits for it.  Waiting is a blocking read, which takes no
CPU from the side whose round is running.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

ENV: Final = "TPROF_AB"  # the JSON a side reads: its side, the channel's fd, the mode
Side = Literal["base", "head"]
BASE: Final = "base"
HEAD: Final = "head"
# How the two sides' measured rounds share the machine: one after the other (each pair's order
# alternating, so neither side always goes first), or both at once.
ALTERNATE: Final = "alternate"
DUET: Final = "duet"
MODES: Final = (ALTERNATE, DUET)


@dataclass(frozen=True, slots=True, kw_only=True)
class SideConfig:
    """What the controller tells a side: which it is, its channel, how rounds are paced, and
    the two trees (the base side refuses code loaded from the head's)."""

    side: Side
    fd: int
    mode: str = ALTERNATE
    base_root: str = ""
    head_root: str = ""
    label: str = ""  # the base, named and resolved ("origin/main at 1a2b3c4d5e")
    ref: str = ""  # the base as the user named it ("origin/main")
    # The CPUs both sides run on.  Alternating, both sides share them all (the cores of a
    # shared machine differ in speed: on two, an unchanged test read +16-30 % with each side
    # on its own core and ±3 % with both on one); in duet, the sides swap cores each round.
    cpus: tuple[int, ...] = ()
    only: tuple[str, ...] = ()  # the tests to run (tprof ab --if-unjudged retry), else all

    def to_env(self) -> str:
        return json.dumps({k: getattr(self, k) for k in self.__slots__})  # type: ignore[attr-defined]

    @classmethod
    def from_env(cls, text: str) -> SideConfig:
        try:
            given = json.loads(text)
            tuples = {k: tuple(given.get(k, ())) for k in ("cpus", "only")}
            return cls(**{**given, **tuples})
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"{ENV} holds no tprof ab side ({exc}); it is set by `tprof ab`"
            ) from exc


class Channel:
    """Newline-delimited JSON messages over a stream socket; None once the peer is gone."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = b""
        self.closed = False

    def send(self, **message: Any) -> None:
        if self.closed:
            return
        try:
            self._sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.closed = True

    def receive(self) -> dict[str, Any] | None:
        while b"\n" not in self._buffer:
            if self.closed:
                return None
            try:
                chunk = self._sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self.closed = True
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        found: dict[str, Any] = json.loads(line)
        return found

    def close(self) -> None:
        self.closed = True
        self._sock.close()


def channel_from_fd(fd: int) -> Channel:
    return Channel(socket.socket(fileno=fd))


@dataclass(slots=True)
class Pairing:
    """This side's half of the protocol.  ``alone`` is set when the peer has no part in the
    current test (it ended it, or it is gone): then nothing waits and nothing is exchanged."""

    config: SideConfig
    channel: Channel
    test: str = ""
    alone: bool = True
    why_alone: str = ""
    _peer_ran: int = 0

    @property
    def side(self) -> str:
        return self.config.side

    @property
    def other(self) -> str:
        return HEAD if self.config.side == BASE else BASE

    def _expect(self, kind: str) -> dict[str, Any] | None:
        """The peer's next ``kind`` message of the current test; None (and alone) when the
        peer ended the test or closed the channel first."""
        while True:
            msg = self.channel.receive()
            if msg is None:
                self._go_alone(f"the {self.other} side stopped")
                return None
            if msg.get("test") != self.test:
                continue  # a test this side has already left
            if msg["kind"] == "end":
                self._go_alone(msg.get("why") or f"the {self.other} side did not profile it")
                return None
            if msg["kind"] == kind:
                return msg

    def _go_alone(self, why: str) -> None:
        self.alone, self.why_alone = True, why

    # ------------------------------------------------------------------ the run

    def common_tests(self, nodeids: Sequence[str]) -> list[str] | None:
        """The tests both sides profile, in the base side's order (None: the peer is gone)."""
        self.channel.send(kind="tests", test="", tests=list(nodeids))
        self.test = ""
        msg = self._expect("tests")
        if msg is None:
            return None
        theirs = [str(n) for n in msg["tests"]]
        base_order = list(nodeids) if self.config.side == BASE else theirs
        other = set(theirs) if self.config.side == BASE else set(nodeids)
        return [n for n in base_order if n in other]

    def begin(self, nodeid: str) -> bool:
        """Meet the peer at ``nodeid``; False when it ended the test first (this side runs
        it alone)."""
        self.test, self.alone, self.why_alone = nodeid, False, ""
        self.channel.send(kind="begin", test=nodeid)
        return self._expect("begin") is not None

    def solo(self, nodeid: str, why: str) -> None:
        """``nodeid`` runs on this side alone (the other side has no such test)."""
        self.test = nodeid
        self._go_alone(why)

    def end(self, nodeid: str, why: str = "") -> None:
        """This side is done with ``nodeid`` (``why``: it did not profile it, and why)."""
        self.channel.send(kind="end", test=nodeid, why=why)
        if self.test == nodeid:
            self._go_alone("ended")

    def plan(self, own: dict[str, Any]) -> dict[str, Any]:
        """The rounds both sides run: the base side's ``own`` plan, which it sends; the head
        side receives it (its own when alone)."""
        if self.alone:
            return own
        if self.config.side == BASE:
            self.channel.send(kind="plan", test=self.test, **own)
            return own
        msg = self._expect("plan")
        return own if msg is None else {k: v for k, v in msg.items() if k not in ("kind", "test")}

    def agree(self, settled: bool) -> bool:
        """Warm-up settled on both sides (either side unsettled: both profile again)."""
        if self.alone:
            return settled
        self.channel.send(kind="settled", test=self.test, settled=settled)
        msg = self._expect("settled")
        return settled if msg is None else settled and bool(msg["settled"])

    def handoff(self, record: dict[str, Any] | None) -> dict[str, Any] | None:
        """The base side sends its rounds (a ``ProfiledTest.to_dict``); the head side
        receives them (None: alone)."""
        if self.alone:
            return None
        if self.config.side == BASE:
            self.channel.send(kind="record", test=self.test, record=record)
            return None
        msg = self._expect("record")
        return None if msg is None else msg["record"]

    def pacer(self, rounds: int) -> Pacer | None:
        return None if self.alone else Pacer(self, rounds)

    # ------------------------------------------------------------------ pacing

    def _rounds_done(self, count: int) -> None:
        """Wait until the peer has run ``count`` measured rounds of this capture."""
        while not self.alone and self._peer_ran < count:
            if (msg := self._expect("ran")) is not None:
                self._peer_ran = int(msg["done"])

    def _ran(self, done: int) -> None:
        self.channel.send(kind="ran", test=self.test, done=done)

    def _barrier(self, name: str) -> None:
        if not self.alone:
            self.channel.send(kind=name, test=self.test)
            self._expect(name)


def first_in_round(j: int) -> str:
    """Which side runs round ``j`` first: the base in even rounds, the head in odd ones, so the
    rounds run base, head, head, base, base, head, … and neither side always goes first."""
    return BASE if j % 2 == 0 else HEAD


def opens_turn(j: int, side: str) -> bool:
    """Whether ``side``'s round ``j`` follows the peer's rounds rather than its own: where it
    goes second in the pair.  In the order base, head, head, base, base, … every pair has one
    round that follows its own side's last round and one that follows the peer's, whose
    caches, TLB and allocator state it meets; the capture runs the body once, unmeasured,
    before such a round (``capture.in_round``), so both rounds of a pair start from their own
    side's state.  Without it, an EmbeddingBag whose lookups were shuffled read +9 and +14 %
    in pairs where stored baselines read +59 % (``benchmarks/ab_reruns.py``): the head's
    cache misses slowed the base's next round too."""
    return first_in_round(j) != side


class Pacer:
    """The measured rounds of one capture, taking turns with the peer's (or, in duet mode,
    started together).  The capture calls :meth:`before` and :meth:`after` around each round
    (j < 0: a profiled warm-up round, not paced), then :meth:`finish`; none of them waits
    once alone."""

    def __init__(self, pairing: Pairing, rounds: int) -> None:
        self._p, self._rounds = pairing, rounds
        self._duet = pairing.config.mode == DUET

    def start(self) -> None:
        self._p._peer_ran = 0
        self._p._barrier("ready")  # neither side's warm-up beside the other's rounds

    def before(self, j: int) -> bool:
        """Wait for this side's slot for round ``j``; whether the round opens its turn, right
        after the peer's rounds (:func:`opens_turn`)."""
        if j < 0:
            return False
        if j == 0:
            self.start()
        if self._duet:
            cpus = self._p.config.cpus
            if len(cpus) >= 2 and hasattr(os, "sched_setaffinity"):  # this thread's core
                os.sched_setaffinity(0, {cpus[(j + (self._p.side == HEAD)) % len(cpus)]})
            self._p._barrier("go")
            return False
        # the peer's rounds before this side's slot: its first j, and its j-th if it goes first
        self._p._rounds_done(j + (first_in_round(j) != self._p.side))
        return opens_turn(j, self._p.side)

    def after(self, j: int) -> None:
        """The turn passes to the peer once this side's consecutive rounds are done (the
        peer wakes once per turn, not beside this side's next round)."""
        if j < 0 or self._duet:
            return
        me = self._p.side
        mine_next = j + 1 < self._rounds and first_in_round(j + 1) == me != first_in_round(j)
        if not mine_next:
            self._p._ran(j + 1)

    def agree(self, settled: bool) -> bool:
        return self._p.agree(settled)

    def finish(self) -> None:
        """Wait for the peer's last round: this side's next work must not share it."""
        if self._duet:
            self._p._barrier("done")
        else:
            self._p._rounds_done(self._rounds)
