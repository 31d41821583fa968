"""The leader's in-memory lease expiry (lock_service/lessor.py), on tables: a new leader
never shortens a lease, renewals from memory, and what must go through the log instead."""

from __future__ import annotations

from lock_service.lessor import Lessor, RenewOutcome

EXTEND_S = 1.0


def promoted(leases: list[tuple[int, float, float]], now: float = 10.0,
             last_token: int = 5) -> Lessor:
    lessor = Lessor()
    lessor.promote(term=3, now=now, leases=leases, last_token=last_token, extend_s=EXTEND_S)
    return lessor


def test_a_new_leader_gives_every_lease_its_ttl_plus_the_extension() -> None:
    # Lease 1's logged expiry is long past (renewed in the old leader's memory since);
    # lease 2 was granted with a long TTL just now: it keeps the later of the two.
    lessor = promoted([(1, 2.0, 4.0), (2, 30.0, 40.0)])
    assert lessor.expires_at(1) == 10.0 + 2.0 + EXTEND_S
    assert lessor.expires_at(2) == 40.0 + EXTEND_S  # max(40, 10 + 30 + 1)
    assert lessor.due(12.9, 10) == ()
    assert lessor.due(13.0, 10) == (1,)


def test_a_renewal_from_memory_counts_from_its_own_time() -> None:
    lessor = promoted([(1, 2.0, 4.0)])
    assert lessor.renew(1, 2.0, now=12.5) is RenewOutcome.RENEWED
    assert lessor.expires_at(1) == 14.5
    assert lessor.renew(1, 2.0, now=12.6) is RenewOutcome.RENEWED
    assert lessor.next_expiry() == 14.6


def test_what_memory_cannot_answer_goes_through_the_log_or_is_ended() -> None:
    lessor = promoted([(1, 2.0, 4.0)], last_token=5)
    assert lessor.renew(1, 5.0, now=11.0) is RenewOutcome.THROUGH_LOG  # a new TTL
    assert lessor.renew(9, 2.0, now=11.0) is RenewOutcome.THROUGH_LOG  # granted after us?
    assert lessor.renew(4, 2.0, now=11.0) is RenewOutcome.ENDED  # known here, and gone
    assert lessor.renew(1, 2.0, now=13.0) is RenewOutcome.ENDED  # its time is up
    assert lessor.expires_at(1) == 13.0, "a lapsed lease is not brought back"


def test_the_log_keeps_the_lessor_in_step() -> None:
    lessor = promoted([])
    lessor.granted(6, 2.0, 12.0)
    assert lessor.renew(6, 2.0, now=11.0) is RenewOutcome.RENEWED
    lessor.renewed_in_log(6, 2.0, 12.5)  # a logged renewal never shortens one from memory
    assert lessor.expires_at(6) == 13.0
    lessor.ended(6)
    assert lessor.renew(6, 2.0, now=11.5) is RenewOutcome.ENDED
    assert lessor.due(100.0, 10) == ()


def test_a_follower_lessor_ignores_the_log_and_due_is_bounded() -> None:
    idle = Lessor()
    idle.granted(1, 2.0, 3.0)
    assert idle.expires_at(1) is None
    lessor = promoted([(t, 1.0, 0.0) for t in range(1, 6)])
    assert lessor.due(100.0, 3) == (1, 2, 3)
    lessor.demote()
    assert lessor.term is None and lessor.due(100.0, 3) == ()
