"""A distributed test's ranks: started, profiled by the one protocol, and brought back
(docs/design.md §17).

:func:`launch` starts ``world_size`` fresh processes (``multiprocessing``'s fork server, with
torch imported once, or spawn: nothing of the pytest process, its threads or its profiler is
inherited), each joining a process group
through a file store of its own, so concurrent tests and xdist workers never share a port.
Every rank builds its step with ``make_step(rank)`` and runs the same protocol: the
calibration's calls (the most any rank needs, agreed by an all-reduce), the warm-up and
measured rounds of :func:`~tprof_engine.capture.session.capture_rounds` with a barrier before
each round (outside it), warm-up extended while any rank's ops still change, then the work
census, which sees the collectives as dispatcher ops.  Each rank writes its Chrome trace while
its process group is up, so torch records the ``distributedInfo`` (rank, world size, backend)
Holistic Trace Analysis reads.  What comes back is plain records, one :class:`RankResult` per
rank; a rank that raises, dies or outlives the timeout is named in a :class:`CaptureError`,
and every rank is stopped before it is raised.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tprof_engine.capture import census as census_mod
from tprof_engine.capture.facts import intra_op_threads
from tprof_engine.capture.session import Call, RoundSpec, calibrate_iterations, capture_rounds
from tprof_engine.model.costs import Costs, Stopwatch
from tprof_engine.model.errors import CaptureError, ConfigError, TprofError
from tprof_engine.model.records import OpTable
from tprof_engine.model.work import WorkTable

BACKENDS = ("gloo", "nccl")
TRACE_NAME = "rank{rank}.pt.trace.json.gz"
_STOP_GRACE_S = 5.0  # after one rank failed, how long the others get to report theirs


@dataclass(frozen=True, slots=True, kw_only=True)
class RankPlan:
    """What every rank is asked to do; crosses to the spawned ranks by pickle."""

    make_step: Callable[[int], Callable[[], Any]]
    world_size: int
    backend: str
    spec: RoundSpec | None  # None: run the step once, unprofiled; iterations 0: calibrate
    min_round_us: float
    census: bool
    stack: bool
    threads: int
    trace_dir: str | None  # each rank writes TRACE_NAME here
    timeout_s: float
    init_method: str = ""
    # The test's environment when it started the ranks: a fork server's children would
    # otherwise see the environment of the moment the server started.
    environ: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class RankResult:
    """What one rank brings back."""

    rank: int
    table: OpTable
    iterations: int
    warmup_used: int
    warmup_settled: bool
    work: WorkTable | None
    census_note: str
    trace: str | None
    trace_problem: str
    costs: Costs


def check(make_step: Any, *, world_size: Any, backend: Any, timeout_s: Any) -> None:
    """A ConfigError naming the first argument of ``tprof.distributed`` that can't be used."""
    if not callable(make_step):
        raise ConfigError(
            f"tprof.distributed's first argument must be make_step(rank) -> step "
            f"(got {type(make_step).__name__})"
        )
    if isinstance(world_size, bool) or not isinstance(world_size, int) or not 1 <= world_size <= 64:
        raise ConfigError(
            f"tprof.distributed 'world_size' must be an integer 1-64 (got {world_size!r})"
        )
    if backend not in BACKENDS:
        raise ConfigError(
            f"tprof.distributed 'backend' must be one of {', '.join(BACKENDS)} (got {backend!r})"
        )
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ConfigError(f"tprof.distributed 'timeout' must be seconds > 0 (got {timeout_s!r})")
    if not dist.is_available():
        raise ConfigError("tprof.distributed needs torch.distributed, which this torch lacks")
    if backend == "nccl" and torch.cuda.device_count() < world_size:
        raise ConfigError(
            f"tprof.distributed: backend 'nccl' needs a GPU per rank: {world_size} ranks, "
            f"{torch.cuda.device_count()} GPU(s) visible; use backend='gloo' on CPU"
        )
    try:
        pickle.dumps(make_step)
    except Exception as exc:
        raise ConfigError(
            f"tprof.distributed: make_step ({getattr(make_step, '__qualname__', make_step)!r}) "
            "can't be sent to the ranks: each rank is a new process that imports it by name, "
            "so define it at the top level of a module (a functools.partial of one works; a "
            f"lambda or a function defined inside the test doesn't): {type(exc).__name__}: {exc}"
        ) from None


def run_once(
    make_step: Callable[[int], Callable[[], Any]],
    *,
    world_size: int,
    backend: str,
    timeout_s: float,
) -> None:
    """Every rank builds its step and runs it once, unprofiled: the test without --tprof."""
    launch(
        RankPlan(
            make_step=make_step,
            world_size=world_size,
            backend=backend,
            spec=None,
            min_round_us=0.0,
            census=False,
            stack=False,
            threads=0,
            trace_dir=None,
            timeout_s=timeout_s,
        )
    )


def launch(plan: RankPlan) -> list[Any]:
    """Run every rank of ``plan`` and return their results (:class:`RankResult`, None for a
    plan without a spec) in rank order."""
    with tempfile.TemporaryDirectory(prefix="tprof-ranks-") as scratch:
        plan = replace(plan, init_method=Path(scratch, "store").as_uri(), environ=dict(os.environ))
        context = _context()
        inbox = context.Queue()
        ranks = [
            context.Process(
                target=_rank_main, args=(rank, plan, inbox), daemon=True, name=f"tprof-rank{rank}"
            )
            for rank in range(plan.world_size)
        ]
        try:
            for p in ranks:
                p.start()
            return _collected(ranks, inbox, plan.timeout_s)
        finally:
            _stop(ranks)
            inbox.close()


def _context() -> Any:
    """Where the ranks come from: a fork server that imported torch once for the process, so
    each capture's ranks start without importing it again (≈ 1.8 s instead of ≈ 3.7 s a
    capture for two ranks on the 2-core VM; the first pays the server's start), else spawn.
    Either way a rank is a process of its own, nothing of the test's process (its threads,
    OpenMP's pool, a profiler) inherited; it gets the test's environment from the plan."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    context = mp.get_context("forkserver")
    context.set_forkserver_preload(["torch", "torch.distributed", __name__])
    return context


def _collected(ranks: list[Any], inbox: Any, timeout_s: float) -> list[Any]:
    """Every rank's result, or a CaptureError naming the ranks that failed, died or hung.

    Once one rank has failed, the others get :data:`_STOP_GRACE_S` to report theirs (they
    fail too, or hang in a collective the failed rank never joins)."""
    done: dict[int, Any] = {}
    failed: dict[int, tuple[float, str]] = {}  # when it failed (monotonic, any process), why
    deadline = time.monotonic() + timeout_s
    while len(done) + len(failed) < len(ranks) and time.monotonic() < deadline:
        try:
            kind, rank, payload = inbox.get(timeout=0.2)
        except queue.Empty:
            failed.update(_dead(ranks, done, failed))
        else:
            if kind == "ok":
                done[rank] = payload
            else:
                failed[rank] = payload
        if failed:
            deadline = min(deadline, time.monotonic() + _STOP_GRACE_S)
    if failed or len(done) < len(ranks):
        raise CaptureError(_failure_text(len(ranks), done, failed, timeout_s))
    return [done[r] for r in range(len(ranks))]


def _dead(
    ranks: list[Any], done: dict[int, Any], failed: dict[int, tuple[float, str]]
) -> dict[int, tuple[float, str]]:
    """Ranks that exited without a word, as of now."""
    now = time.monotonic()
    return {
        rank: (now, f"exited with code {p.exitcode} before reporting (killed, or crashed)")
        for rank, p in enumerate(ranks)
        if rank not in done and rank not in failed and not p.is_alive()
    }


def _failure_text(
    world: int, done: dict[int, Any], failed: dict[int, tuple[float, str]], timeout_s: float
) -> str:
    # in the order they failed, not as their reports arrived: the first is the cause, the
    # others mostly lost their peer (and may report first: a rank that raises exits at once)
    order = [(rank, why) for rank, (_, why) in sorted(failed.items(), key=lambda f: f[1][0])]
    parts = [f"rank {rank} {why}" for rank, why in order[:1]]
    parts += [f"then rank {rank} {_first_line(why)}" for rank, why in order[1:]]
    silent = [r for r in range(world) if r not in done and r not in failed]
    if silent:
        who = ", ".join(map(str, silent))
        parts.append(
            f"rank{'s' if len(silent) > 1 else ''} {who} didn't finish within {timeout_s:g} s "
            "and were stopped (a hang: a collective that another rank never calls?)"
        )
    return f"distributed test of {world} ranks failed: " + "; ".join(parts)


def _first_line(text: str, limit: int = 240) -> str:
    line = text.strip().splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _stop(ranks: list[Any]) -> None:
    """Every rank process gone: asked to stop, then killed."""
    for p in ranks:
        if p.is_alive():
            p.terminate()
    for p in ranks:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join(timeout=2.0)


# ---------------------------------------------------------------------------- in each rank


def _rank_main(rank: int, plan: RankPlan, outbox: Any) -> None:
    """One rank: join the group, build the step, run the protocol, report."""
    if plan.environ:
        os.environ.clear()
        os.environ.update(plan.environ)
    body = _FailedAt()
    try:
        with _group(rank, plan), intra_op_threads(plan.threads), body:
            result = _profiled(rank, plan)
        outbox.put(("ok", rank, result))
    except TprofError as exc:
        outbox.put(("error", rank, (body.when(), f"failed: {exc}")))
    except BaseException as exc:  # the test's own error: its traceback is the story
        tail = "".join(traceback.format_exception(exc)[-6:]).rstrip()
        why = f"raised {type(exc).__name__}: {exc}\n{tail}"
        outbox.put(("error", rank, (body.when(), why)))


class _FailedAt:
    """When the body ended, read before the group is torn down: leaving the group closes the
    rank's connections, so a peer's lost-connection error comes after the body's own."""

    def __init__(self) -> None:
        self._at: float | None = None

    def __enter__(self) -> None:
        return None

    def __exit__(self, *_: object) -> None:
        self._at = time.monotonic()

    def when(self) -> float:
        """When the body failed; now, where it never ran (the group could not start)."""
        return time.monotonic() if self._at is None else self._at


@contextlib.contextmanager
def _group(rank: int, plan: RankPlan) -> Iterator[None]:
    # as torchrun sets them: kineto writes the trace's distributedInfo from RANK and WORLD_SIZE
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(plan.world_size),
        LOCAL_WORLD_SIZE=str(plan.world_size),
    )
    if plan.backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        plan.backend,
        init_method=plan.init_method,
        rank=rank,
        world_size=plan.world_size,
        timeout=timedelta(seconds=plan.timeout_s),
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


def _profiled(rank: int, plan: RankPlan) -> RankResult | None:
    watch = Stopwatch()
    step = plan.make_step(rank)
    if not callable(step):
        raise ConfigError(
            f"make_step({rank}) returned {type(step).__name__}, not the step to profile: "
            "return a function that runs one step"
        )
    if plan.spec is None:
        step()
        _barrier()
        return None
    iterations = plan.spec.iterations
    if iterations < 1:
        with watch.stage("calibrate"):
            iterations = _agreed_max(
                calibrate_iterations(step, min_round_us=plan.min_round_us, device=plan.spec.device)
            )
    spec = replace(
        plan.spec,
        iterations=iterations,
        trace_metadata={**plan.spec.trace_metadata, "rank": rank},
    )
    captured = capture_rounds(Call(fn=step, setup=_barrier), spec, agree=_all_agree)
    watch.merge(captured.costs)
    trace, problem = None, ""
    if plan.trace_dir is not None and captured.write_trace is not None:
        with watch.stage("export"):
            written, problem = captured.write_trace(
                Path(plan.trace_dir) / TRACE_NAME.format(rank=rank)
            )
        trace = None if written is None else str(written)
    work, note = None, ""
    if plan.census:
        with watch.stage("census"):
            work, note = _census(step, iterations, stack=plan.stack)
    _barrier()
    return RankResult(
        rank=rank,
        table=captured.table,
        iterations=iterations,
        warmup_used=captured.warmup_used,
        warmup_settled=captured.warmup_settled,
        work=work,
        census_note=note,
        trace=trace,
        trace_problem=problem,
        costs=watch.costs(),
    )


def _census(step: Callable[[], Any], iterations: int, *, stack: bool) -> tuple[Any, str]:
    try:
        return census_mod.take_census(step, iterations=iterations, stack=stack), ""
    except TprofError as exc:
        return None, f"no work census: {exc}"


def _barrier() -> None:
    dist.barrier()


def _all_agree(flag: bool) -> bool:
    """True in every rank only when it is true in every rank."""
    return _agreed_max(0 if flag else 1) == 0


def _agreed_max(value: int) -> int:
    t = torch.tensor([value], dtype=torch.int64)
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())
