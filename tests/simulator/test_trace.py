"""Replaying a CSV trace: queue mapping, the days window, dropped jobs, one line per bad input."""

from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from gpuyield.agents.simulator.jobs import JobKind
from gpuyield.agents.simulator.trace import (
    TraceError,
    TraceLoad,
    parse_queue_map,
    parse_trace,
    pods_for,
    read_trace_text,
)
from gpuyield.schemas import InputError

PHILLY = (
    Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "philly" / "philly_jobs.csv"
)
QUEUES = {"production-core", "research-elastic", "shared"}
HEADER = "job_id,submit_s,duration_s,num_gpus,queue\n"
SMALL = HEADER + (
    "a,100,3600,8,prod\n"
    "b,160,7200,1,lab\n"
    "c,220,600,12,other\n"
    "d,86500,60,2,prod\n"
    "e,200000,60,4,lab\n"
)
MAP = {"prod": "production-core", "lab": "research-elastic", "*": "shared"}


def _parse(
    text: str = SMALL,
    *,
    queue_map: dict[str, str] | None = None,
    days: float | None = None,
    nodes: int = 64,
    seed: int = 0,
) -> TraceLoad:
    return parse_trace(
        text,
        queue_map=MAP if queue_map is None else queue_map,
        known_queues=QUEUES,
        days=days,
        nodes=nodes,
        gpus_per_node=8,
        rng=random.Random(seed),
    )


def _error(text: str, **kwargs: object) -> str:
    with pytest.raises(TraceError) as info:
        _parse(text, **kwargs)  # type: ignore[arg-type]
    return str(info.value)


def test_a_small_trace_becomes_jobs_rebased_and_mapped() -> None:
    load = _parse()
    assert (load.rows, load.dropped_too_large, load.outside_days) == (5, 0, 0)
    by_name = {j.name: j for j in load.jobs}
    assert [j.name for j in load.jobs] == ["a", "b", "c", "d", "e"]
    assert by_name["a"].submit_s == 0
    assert by_name["e"].submit_s == 200_000 - 100
    assert (by_name["a"].queue, by_name["a"].kind) == ("production-core", JobKind.PRODUCTION)
    assert (by_name["b"].queue, by_name["b"].kind) == ("research-elastic", JobKind.RESEARCH)
    assert (by_name["c"].queue, by_name["c"].kind) == ("shared", JobKind.SHARED)
    assert by_name["a"].duration_s == 3600


def test_production_trace_jobs_get_an_sla_by_the_generators_rule() -> None:
    load = _parse()
    for job in load.jobs:
        if job.kind is JobKind.PRODUCTION:
            assert job.sla_s is not None
            low = max(1.5 * job.duration_s, job.duration_s + 15 * 60)
            high = max(3 * job.duration_s, job.duration_s + 15 * 60)
            assert low <= job.sla_s <= high
            assert job.priority == 1000
        else:
            assert job.sla_s is None


def test_missing_fields_are_drawn_by_the_seeded_rules() -> None:
    assert _parse(seed=3) == _parse(seed=3)
    draws = {
        tuple((j.checkpoint_interval_s, j.restart_job) for j in _parse(seed=s).jobs)
        for s in range(5)
    }
    assert len(draws) == 5
    for job in _parse().jobs:
        low, high = (30, 120) if job.kind is JobKind.RESEARCH else (20, 60)
        assert low * 60 <= job.checkpoint_interval_s <= high * 60


@pytest.mark.parametrize(
    ("gpus", "shape"),
    [
        (1, (1, 1)),
        (4, (1, 4)),
        (8, (1, 8)),
        (12, (2, 8)),
        (16, (2, 8)),
        (24, (3, 8)),
        (128, (16, 8)),
    ],
)
def test_gpus_become_one_pod_or_whole_nodes_rounded_up(gpus: int, shape: tuple[int, int]) -> None:
    assert pods_for(gpus, 8) == shape


def test_a_12_gpu_job_holds_two_whole_nodes() -> None:
    job = next(j for j in _parse().jobs if j.name == "c")
    assert (job.pods, job.gpus_per_pod, job.gpus) == (2, 8, 16)


def test_jobs_larger_than_the_cluster_are_dropped_and_counted() -> None:
    load = _parse(nodes=1)
    assert load.dropped_too_large == 1
    assert "c" not in {j.name for j in load.jobs}
    assert load.rows == 5


def test_days_keeps_the_first_days_from_the_first_submission() -> None:
    load = _parse(days=1)
    assert [j.name for j in load.jobs] == ["a", "b", "c"]
    assert load.outside_days == 2
    assert load.rows == 5
    # "d" is submitted exactly one day after "a": the window is half-open.
    assert [j.name for j in _parse(days=86_401 / 86_400).jobs] == ["a", "b", "c", "d"]


def test_a_queue_named_like_a_scenario_queue_maps_to_itself() -> None:
    text = HEADER + "x,0,10,1,shared\ny,5,10,1,research-elastic\n"
    load = _parse(text, queue_map={})
    assert [j.queue for j in load.jobs] == ["shared", "research-elastic"]


def test_an_explicit_entry_wins_over_the_wildcard() -> None:
    text = HEADER + "x,0,10,1,prod\ny,5,10,1,zzz\n"
    load = _parse(text)
    assert [j.queue for j in load.jobs] == ["production-core", "shared"]


def test_extra_columns_blank_lines_and_a_bom_are_fine() -> None:
    text = "\ufeffqueue,num_gpus,extra,duration_s,submit_s,job_id\nprod,2,zz,50,7,j1\n\n"
    load = _parse(text)
    assert [(j.name, j.gpus, j.submit_s) for j in load.jobs] == [("j1", 2, 0)]


# -- bad input: one line naming the row and the field -------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("x,0,10,-2,prod", "row 2: num_gpus: must be a positive integer, got '-2'"),
        ("x,0,10,0,prod", "row 2: num_gpus: must be a positive integer, got '0'"),
        ("x,0,10,1.5,prod", "row 2: num_gpus: must be a positive integer, got '1.5'"),
        ("x,0,10,eight,prod", "row 2: num_gpus: must be a positive integer, got 'eight'"),
        ("x,0,0,1,prod", "row 2: duration_s: must be a positive number of seconds, got '0'"),
        ("x,0,nan,1,prod", "row 2: duration_s: must be a positive number of seconds, got 'nan'"),
        ("x,soon,10,1,prod", "row 2: submit_s: must be a number of seconds, got 'soon'"),
        (",0,10,1,prod", "row 2: job_id: must not be empty"),
        ("a,0,10,1,prod", "row 2: job_id: 'a' is already used by row 1"),
        ("x,0,10,1,", "row 2: queue: must not be empty"),
        ("x,0,10", "row 2: num_gpus: missing (the row has 3 fields)"),
    ],
)
def test_a_bad_row_is_named_with_its_field(row: str, message: str) -> None:
    assert _error(HEADER + "a,0,10,1,prod\n" + row + "\n") == message


def test_an_unmapped_queue_says_how_to_map_it() -> None:
    text = HEADER + "a,0,10,1,prod\nb,0,10,1,prod\nc,0,10,1,6214e9\n"
    message = _error(text, queue_map={"prod": "shared"})
    assert (
        message == "row 3: queue: '6214e9' is not mapped (add it to --queue-map or use '*=QUEUE')"
    )


def test_a_map_onto_an_unknown_queue_is_refused() -> None:
    message = _error(SMALL, queue_map={"prod": "production"})
    assert message.startswith("--queue-map: 'prod=production': 'production' is not a queue")
    assert "production-core" in message


def test_a_missing_column_is_named() -> None:
    text = "job_id,submit_s,num_gpus,queue\na,0,1,prod\n"
    assert _error(text).startswith("trace: missing column 'duration_s' (the header is ")


def test_several_missing_columns_are_all_named() -> None:
    message = _error("job_id,submit_s,queue\na,0,prod\n")
    assert message.startswith("trace: missing columns 'duration_s', 'num_gpus'")


@pytest.mark.parametrize(
    "text",
    ["", "   \n", '{"jobs": []}', "just some words\nmore words\n", "a\x00b\x00c", "x;y;z\n1;2;3\n"],
    ids=["empty", "blank", "json", "prose", "binary", "semicolons"],
)
def test_what_is_not_a_csv_trace_is_said_so(text: str) -> None:
    assert _error(text).startswith("trace: not a CSV file")


def test_a_header_without_rows_is_refused() -> None:
    assert _error(HEADER) == "trace: no job rows after the header"


def test_rows_past_the_days_window_are_still_checked() -> None:
    text = HEADER + "a,0,10,1,prod\nb,999999,10,-1,prod\n"
    assert _error(text, days=1).startswith("row 2: num_gpus:")


def test_trace_errors_are_input_errors_for_the_cli() -> None:
    assert issubclass(TraceError, InputError)
    assert issubclass(TraceError, ValueError)


def test_a_binary_file_is_not_a_csv_trace(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    with pytest.raises(TraceError, match="not a CSV file"):
        read_trace_text(path)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="trace: cannot read"):
        read_trace_text(tmp_path / "absent.csv")


def test_a_file_with_a_bom_is_read_as_text(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xef\xbb\xbf" + SMALL.encode())
    assert read_trace_text(path) == SMALL


# -- the queue map ---------------------------------------------------------------------


def test_a_queue_map_parses_with_a_wildcard_and_spaces() -> None:
    assert parse_queue_map(" a = production-core, b=shared ,*=research-elastic") == {
        "a": "production-core",
        "b": "shared",
        "*": "research-elastic",
    }
    assert parse_queue_map("") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a", "--queue-map: entry 'a' is not SRC=DST (e.g. '6214e9=shared')"),
        ("a=b=c", "--queue-map: entry 'a=b=c' is not SRC=DST (e.g. '6214e9=shared')"),
        ("=shared", "--queue-map: entry '=shared' needs a queue on both sides of '='"),
        ("a=", "--queue-map: entry 'a=' needs a queue on both sides of '='"),
        ("a=shared,,b=shared", "--queue-map: entry '' is not SRC=DST (e.g. '6214e9=shared')"),
        ("a=shared,a=research-elastic", "--queue-map: queue 'a' is mapped twice"),
    ],
)
def test_a_bad_queue_map_is_one_clear_line(text: str, message: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_queue_map(text)
    assert str(info.value) == message


# -- the Philly trace ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def philly_head() -> str:
    if not PHILLY.exists():
        pytest.skip(f"the Philly trace is not at {PHILLY}")
    with PHILLY.open(encoding="utf-8") as lines:
        return "".join(itertools.islice(lines, 2001))


def test_the_first_rows_of_the_philly_trace_replay(philly_head: str) -> None:
    load = _parse(
        philly_head,
        queue_map={"ee9e8c": "production-core", "6214e9": "research-elastic", "*": "shared"},
    )
    assert load.rows == 2000
    assert len(load.jobs) + load.dropped_too_large == 2000
    assert load.jobs[0].name == "philly-r31567"
    assert load.jobs[0].submit_s == 0
    assert {j.queue for j in load.jobs} == QUEUES
    assert all(j.sla_s is not None for j in load.jobs if j.queue == "production-core")


def test_the_philly_trace_needs_its_queues_mapped(philly_head: str) -> None:
    message = _error(philly_head, queue_map={"7f04ca": "shared"})
    assert (
        message == "row 2: queue: '6214e9' is not mapped (add it to --queue-map or use '*=QUEUE')"
    )


def test_the_philly_trace_cut_to_days(philly_head: str) -> None:
    load = _parse(philly_head, queue_map={"*": "shared"}, days=14)
    assert load.jobs
    assert all(j.submit_s < 14 * 86_400 for j in load.jobs)
    assert load.outside_days == 2000 - len(load.jobs) - load.dropped_too_large
    assert load.outside_days > 0


def test_philly_jobs_larger_than_a_small_cluster_are_dropped(philly_head: str) -> None:
    load = _parse(philly_head, queue_map={"*": "shared"}, nodes=1)
    assert load.dropped_too_large > 0
    assert all(j.gpus <= 8 for j in load.jobs)


def test_a_later_start_replays_from_there_with_its_warm_up() -> None:
    """``start_days`` moves time 0; the ``warmup_s`` before it is replayed at negative times."""
    load = parse_trace(
        SMALL,
        queue_map=MAP,
        known_queues=QUEUES,
        days=1,
        nodes=64,
        gpus_per_node=8,
        rng=random.Random(0),
        start_days=1,
        warmup_s=86_300,
    )
    # The window starts one day after "a" (at 100 s): at 86,500 s, where "d" is submitted.
    assert [(j.name, j.submit_s) for j in load.jobs] == [("c", -86_280), ("d", 0)]
    assert (load.before_start, load.outside_days, load.rows) == (2, 1, 5)


def test_without_a_start_the_warm_up_finds_nothing_before_the_first_row() -> None:
    plain = _parse(days=1)
    warmed = parse_trace(
        SMALL,
        queue_map=MAP,
        known_queues=QUEUES,
        days=1,
        nodes=64,
        gpus_per_node=8,
        rng=random.Random(0),
        warmup_s=86_400,
    )
    assert warmed == plain
