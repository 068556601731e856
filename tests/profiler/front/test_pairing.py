"""tprof ab's two sides: the channel, the meeting at each test, the turns of the rounds, and a
side that goes away (tprof_engine.pairing)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tprof_engine.pairing import (
    ALTERNATE,
    BASE,
    DUET,
    ENV,
    HEAD,
    Channel,
    Pairing,
    SideConfig,
    first_in_round,
)


@pytest.fixture
def pair() -> Iterator[Callable[..., tuple[Pairing, Pairing]]]:
    """Two sides joined as ``tprof ab`` joins them; their sockets closed afterwards."""
    made: list[socket.socket] = []

    def make(mode: str = ALTERNATE) -> tuple[Pairing, Pairing]:
        a, b = socket.socketpair()
        made.extend((a, b))
        return (
            Pairing(SideConfig(side=BASE, fd=-1, mode=mode), Channel(a)),
            Pairing(SideConfig(side=HEAD, fd=-1, mode=mode), Channel(b)),
        )

    yield make
    for sock in made:
        sock.close()


def both(base: Callable[[], Any], head: Callable[[], Any]) -> tuple[Any, Any]:
    """Run the two sides' steps at once, as the two processes do; their results."""
    out: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(name: str, fn: Callable[[], Any]) -> None:
        try:
            out[name] = fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n, f)) for n, f in (("b", base), ("h", head))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "a side is still waiting"
    if errors:
        raise errors[0]
    return out["b"], out["h"]


def test_each_pair_of_rounds_alternates_which_side_goes_first() -> None:
    assert [first_in_round(j) for j in range(4)] == [BASE, HEAD, BASE, HEAD]


def test_the_sides_agree_on_the_common_tests_in_the_base_order(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    base, head = pair()
    got = both(
        lambda: base.common_tests(["t::a", "t::b", "t::c"]),
        lambda: head.common_tests(["t::c", "t::new", "t::a"]),
    )
    assert got == (["t::a", "t::c"], ["t::a", "t::c"])


def rounds_of(
    p: Pairing, rounds: int, log: list[str], warmup: int = 1, opened: list[str] | None = None
) -> None:
    p.begin("t::a")
    pacer = p.pacer(rounds)
    assert pacer is not None
    for j in range(-warmup, rounds):  # the profiled warm-up rounds are not paced
        opens = pacer.before(j)
        if opens and opened is not None:
            opened.append(f"{p.side[0]}{j}")
        if j >= 0:
            log.append(f"{p.side[0]}{j}")
            time.sleep(0.002)
        pacer.after(j)
    pacer.finish()
    p.end("t::a")


def test_alternating_rounds_never_overlap_and_go_in_turn(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    base, head = pair()
    log: list[str] = []
    both(lambda: rounds_of(base, 6, log), lambda: rounds_of(head, 6, log))
    assert log == ["b0", "h0", "h1", "b1", "b2", "h2", "h3", "b3", "b4", "h4", "h5", "b5"]


def test_a_round_right_after_the_peers_rounds_opens_its_sides_turn(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    """Those rounds get the body once, unmeasured, before them (capture.session): each pair
    has one, and it alternates sides with the order."""
    base, head = pair()
    log: list[str] = []
    opened: list[str] = []
    both(
        lambda: rounds_of(base, 6, log, opened=opened),
        lambda: rounds_of(head, 6, log, opened=opened),
    )
    assert sorted(opened) == sorted(["h0", "b1", "h2", "b3", "h4", "b5"])
    for name in opened:  # each follows the other side's round in the log
        assert log[log.index(name) - 1][0] != name[0]
    duet: list[str] = []
    base, head = pair(DUET)
    both(lambda: rounds_of(base, 4, [], opened=duet), lambda: rounds_of(head, 4, [], opened=duet))
    assert duet == []


def test_duet_rounds_start_together(pair: Callable[..., tuple[Pairing, Pairing]]) -> None:
    base, head = pair(DUET)
    log: list[str] = []
    both(lambda: rounds_of(base, 4, log), lambda: rounds_of(head, 4, log))
    assert sorted(log[:2]) == ["b0", "h0"] and sorted(log[-2:]) == ["b3", "h3"]


def test_the_base_plans_and_hands_its_rounds_over(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    base, head = pair()

    def base_side() -> Any:
        base.begin("t::a")
        plan = base.plan({"iterations": 7, "rounds": 12})
        settled = base.agree(True)
        base.handoff({"nodeid": "t::a", "rows": [1, 2]})
        base.end("t::a")
        return plan, settled

    def head_side() -> Any:
        head.begin("t::a")
        plan = head.plan({})
        settled = head.agree(False)  # either side unsettled: both warm up longer
        record = head.handoff(None)
        head.end("t::a")
        return plan, settled, record

    (b_plan, b_settled), (h_plan, h_settled, record) = both(base_side, head_side)
    assert b_plan == h_plan == {"iterations": 7, "rounds": 12}
    assert (b_settled, h_settled) == (False, False)
    assert record == {"nodeid": "t::a", "rows": [1, 2]}


def test_a_test_the_other_side_did_not_profile_runs_alone(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    base, head = pair()

    def base_side() -> Any:  # its test was skipped: it ends it without profiling
        base.begin("t::a")
        base.end("t::a", why="the base side skipped it")
        base.begin("t::b")
        return base.plan({"iterations": 3})

    def head_side() -> Any:
        head.begin("t::a")
        alone = (head.plan({"iterations": 1}), head.handoff(None), head.alone, head.why_alone)
        head.end("t::a")
        head.begin("t::b")
        return alone, head.plan({})

    b_plan, (alone, h_plan) = both(base_side, head_side)
    assert alone == ({"iterations": 1}, None, True, "the base side skipped it")
    assert b_plan == h_plan == {"iterations": 3}  # and the next test is paired again


def test_a_side_that_stops_leaves_the_other_waiting_for_nothing(
    pair: Callable[..., tuple[Pairing, Pairing]],
) -> None:
    base, head = pair()
    base.channel.close()  # the base's process died
    assert head.begin("t::a") is False
    pacer = head.pacer(4)
    assert head.alone and head.why_alone == "the base side stopped" and pacer is None
    assert head.handoff(None) is None and head.agree(True) is True


def test_a_side_config_goes_through_the_environment() -> None:
    config = SideConfig(side=HEAD, fd=5, mode=DUET, base_root="/b", head_root="/h", cpus=(2, 3))
    assert SideConfig.from_env(config.to_env()) == config
    with pytest.raises(ValueError, match=ENV):
        SideConfig.from_env("{not json")
