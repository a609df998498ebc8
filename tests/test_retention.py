"""spill.retention.doomed: which artifacts retention removes (both stores use it)."""

from __future__ import annotations

from spill import ArtifactInfo
from spill.retention import doomed

NOW = 1_000_000.0


def art(owner: str, name: str, size: int, age: float) -> ArtifactInfo:
    return ArtifactInfo(owner, name, size, NOW - age)


def ids(found: list[ArtifactInfo]) -> list[str]:
    return [a.id for a in found]


def test_one_owner_loses_its_oldest_first_until_the_total_fits() -> None:
    mine = [art("a", f"x{i}", 100, 100 - i) for i in range(5)]
    assert ids(doomed(mine, max_age_seconds=10**6, max_total_bytes=250, now=NOW)) == ["x0", "x1", "x2"]


def test_the_owner_that_holds_the_most_pays_for_the_excess() -> None:
    heavy = [art("heavy", f"h{i}", 400, 50 - i) for i in range(4)]
    light = [art("light", "l0", 100, 90)]  # older than all of heavy's
    removed = doomed([*heavy, *light], max_age_seconds=10**6, max_total_bytes=1000, now=NOW)
    assert ids(removed) == ["h0", "h1"]  # 1700 -> 900; light's older artifact stays


def test_once_even_the_owners_take_turns_and_ties_go_by_owner_key() -> None:
    found = [art("b", "b0", 100, 10), art("a", "a0", 100, 20), art("a", "a1", 100, 5), art("b", "b1", 100, 1)]
    assert ids(doomed(found, max_age_seconds=10**6, max_total_bytes=100, now=NOW)) == ["a0", "b0", "a1"]


def test_expired_ones_go_and_protected_ones_stay_though_they_count() -> None:
    found = [art("a", "old", 10, 500), art("a", "fresh", 900, 1), art("b", "b0", 100, 50)]
    removed = doomed(found, max_age_seconds=100, max_total_bytes=500, now=NOW, protected=lambda a: a.id == "fresh")
    assert ids(removed) == ["old", "b0"]  # a holds the most, but only its protected one is left


def test_a_burst_of_one_owner_costs_its_own_fresh_output_never_anothers() -> None:
    """QA of 2026-12-06: Bob spilled one result, then Alice eight within the minute; Alice's
    were all protected, so her excess was taken from Bob: his fresh id read "no artifact".
    Now fresh artifacts go only once nothing older is left, the spiller's own first (oldest
    first, its newest never), then another owner's."""
    bob = [art("bob", "b-old", 300, 500), art("bob", "b-fresh", 300, 30)]
    alice = [art("alice", f"a{i}", 300, 20 - i) for i in range(8)]  # a7 the newest
    removed = doomed(
        [*bob, *alice], max_age_seconds=10**6, max_total_bytes=1000, now=NOW, spiller="alice", fresh_seconds=60
    )
    assert ids(removed) == ["b-old", "a0", "a1", "a2", "a3", "a4", "a5"]  # left: b-fresh and a6, a7 (900)
    # Nothing else left: then another's fresh one, never the spiller's newest.
    tight = doomed([*bob, *alice], max_age_seconds=10**6, max_total_bytes=0, now=NOW, spiller="alice", fresh_seconds=60)
    assert ids(tight)[-1] == "a6" and "b-fresh" in ids(tight) and "a7" not in ids(tight)
    # With no spiller (the artifacts command), freshness spares nothing.
    assert "b-fresh" in ids(doomed([*bob, *alice], max_age_seconds=10**6, max_total_bytes=0, now=NOW))


def test_every_id_one_answer_hands_out_is_spared_not_only_the_newest() -> None:
    """A result saves its text and its structuredContent apart (a search, several schemas): with
    nothing older left, the text's id, handed out in the same answer, was removed at once."""
    older = art("alice", "a-old", 300, 30)
    text, structured = art("alice", "text", 300, 1), art("alice", "structured", 300, 0)

    def removed(found: list[ArtifactInfo], handed: set[str]) -> list[str]:
        chosen = doomed(
            found, max_age_seconds=10**6, max_total_bytes=0, now=NOW, spiller="alice", fresh_seconds=60, handed=handed
        )
        return ids(chosen)

    assert removed([older, text, structured], set()) == ["a-old", "text"]
    assert removed([older, text, structured], {"text", "structured"}) == ["a-old"]
    # Another owner's artifact of the same id is not the spiller's: never spared for it.
    assert removed([art("bob", "text", 300, 2), structured], {"text"}) == ["text"]
