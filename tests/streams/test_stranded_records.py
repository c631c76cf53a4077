"""Partitions read past records that no agent processed are sought back to their commit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpuyield.streams.stranded_records import MAX_SEEKS_BACK, Seen, StrandedWatch

HB3 = ("gpuyield.heartbeats", 3)
HB5 = ("gpuyield.heartbeats", 5)
TICKS = ("gpuyield.ticks", 0)


def test_a_partition_read_past_its_commit_with_nothing_in_flight_twice_is_sought_back() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    stuck = Seen(position=108, committed=60, idle=True)
    assert watch.check({HB3: stuck}).seek_back == {}  # once could be a commit on its way
    assert watch.check({HB3: stuck}).seek_back == {HB3: 60}


def test_a_partition_whose_commit_caught_up_is_left_alone() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    watch.check({HB3: Seen(position=108, committed=60, idle=True)})
    assert watch.check({HB3: Seen(position=108, committed=108, idle=True)}).seek_back == {}


def test_a_partition_with_an_event_in_flight_is_left_alone() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    busy = Seen(position=108, committed=60, idle=False)  # a slow agent on it
    watch.check({HB3: busy})
    assert watch.check({HB3: busy}).seek_back == {}


def test_a_partition_still_being_read_is_left_alone() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    watch.check({HB3: Seen(position=90, committed=60, idle=True)})
    assert watch.check({HB3: Seen(position=108, committed=60, idle=True)}).seek_back == {}


def test_a_partition_not_flowing_at_one_check_starts_over() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    stuck = Seen(position=132, committed=19, idle=True)
    watch.check({TICKS: stuck})
    watch.check({})  # a rebalance under way
    assert watch.check({TICKS: stuck}).seek_back == {}
    assert watch.check({TICKS: stuck}).seek_back == {TICKS: 19}


def test_a_record_no_agent_can_take_is_given_up_once_after_the_last_seek_back() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    stuck = Seen(position=108, committed=60, idle=True)
    watch.check({HB3: stuck})
    sought = 0
    for _ in range(MAX_SEEKS_BACK):
        assert watch.check({HB3: stuck}).seek_back == {HB3: 60}
        sought += 1
        # the records were read again and skipped again: the same state returns
        watch.check({HB3: Seen(position=60, committed=60, idle=False)})
        watch.check({HB3: stuck})
    verdict = watch.check({HB3: stuck})
    assert (verdict.seek_back, verdict.given_up) == ({}, (HB3,))
    assert watch.check({HB3: stuck}).given_up == ()
    assert sought == MAX_SEEKS_BACK


def test_a_seek_back_that_worked_resets_the_count() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch(max_seeks_back=1)
    watch.check({HB3: Seen(position=108, committed=60, idle=True)})
    assert watch.check({HB3: Seen(position=108, committed=60, idle=True)}).seek_back == {HB3: 60}
    watch.check({HB3: Seen(position=108, committed=108, idle=True)})  # processed and committed
    watch.check({HB3: Seen(position=150, committed=120, idle=True)})
    assert watch.check({HB3: Seen(position=150, committed=120, idle=True)}).seek_back == {HB3: 120}


def test_a_revoked_partition_is_forgotten() -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    stuck = Seen(position=108, committed=60, idle=True)
    watch.check({HB3: stuck, HB5: stuck})
    watch.forget([HB3])
    assert watch.check({HB3: stuck, HB5: stuck}).seek_back == {HB5: 60}


@given(
    checks=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=500),
            st.integers(min_value=0, max_value=500),
            st.booleans(),
        ),
        max_size=40,
    )
)
def test_only_an_idle_unchanged_partition_past_its_commit_is_ever_sought_back(
    checks: list[tuple[int, int, bool]],
) -> None:
    watch: StrandedWatch[tuple[str, int]] = StrandedWatch()
    before: Seen | None = None
    for position, committed, idle in checks:
        now = Seen(position, committed, idle)
        back = watch.check({HB3: now}).seek_back
        if back:
            assert before == now
            assert now.idle
            assert now.position > now.committed
            assert back == {HB3: committed}
        before = now
