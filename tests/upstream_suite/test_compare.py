"""The suite's verdict: a case upstream passes must pass on the port or match a listed deviation."""

from __future__ import annotations

import pytest

from tools.upstream_suite.compare import Deviation, compare, evidence, load_deviations, render
from tools.upstream_suite.run import SideRun

pytestmark = pytest.mark.kernels_ci


def _side(name: str, **outcomes: str) -> SideRun:
    return SideRun(name, {k.replace("__", "::"): (v, f"why {k}") for k, v in outcomes.items()}, None, 1.0)


def test_an_unlisted_port_failure_fails_the_run_and_is_named():
    upstream = _side("upstream", a__t1="passed", a__t2="passed", b__t3="skipped")
    port = _side("port", a__t1="passed", a__t2="failed", b__t3="skipped")
    result = compare(upstream, port, [])
    assert not result.ok and result.both_pass == 1
    assert result.unexplained == [("a::t2", "failed", "why a__t2")]
    assert any("UNEXPLAINED: a::t2: port failed" in line for line in render(result, upstream, port))


def test_a_listed_deviation_explains_its_cases_and_a_collection_error_covers_its_file():
    upstream = _side("upstream", a__t1="passed", a__t2="passed", c__t9="passed")
    port = _side("port", a__t1="passed", a__t2="failed", c="collection error")
    deviations = [Deviation(("a::t2",), "reason A"), Deviation(("c::*",), "reason C")]
    result = compare(upstream, port, deviations)
    assert result.ok and result.deviations == {"reason A": ["a::t2"], "reason C": ["c::t9"]}
    assert result.port["collection error"] == 1


def test_upstream_failures_are_not_held_against_the_port_and_stale_entries_are_noted():
    upstream = _side("upstream", a__t1="failed", a__t2="passed")
    port = _side("port", a__t1="passed", a__t2="passed")
    result = compare(upstream, port, [Deviation(("a::t2",), "was needed once")])
    assert result.ok and result.port_only_passes == ["a::t1"]
    assert result.stale == ["was needed once"]


def test_nothing_passing_is_a_failure():
    result = compare(_side("upstream", a__t1="skipped"), _side("port", a__t1="skipped"), [])
    assert not result.ok


def test_every_listed_deviation_has_tests_and_a_reason():
    deviations = load_deviations()
    assert all(d.patterns and d.reason for d in deviations)


def test_the_evidence_counts_a_fix_by_its_cases_passing_on_both_sides():
    upstream = _side("upstream", a__fix1="passed", a__fix2="passed", a__fix3="skipped", a__other="passed")
    port = _side("port", a__fix1="passed", a__fix2="failed", a__fix3="skipped", a__other="passed")
    assert evidence(upstream, port, {"the fix": ("a::fix*",)}) == [
        "  fix, the fix: the port passes 1 of the 2 cases upstream passes here (1 more skip or fail on upstream)"]
