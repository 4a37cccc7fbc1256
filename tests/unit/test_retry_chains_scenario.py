"""Eight simulated weeks of one 60-node job's failures and retries: the retry advisor's and the
node ledger's output against the scenario's ground truth (streams.lab.simulator.retry_chains)."""

from __future__ import annotations

import pytest

from streams.lab.simulator.retry_chains import compare, generate, replay


@pytest.fixture(scope="module", params=[1, 2])
def figures(request):
    scenario = generate(request.param, days=56)
    return compare(scenario, replay(scenario))


def test_every_failed_attempt_gets_the_step_its_cause_calls_for(figures):
    assert figures["failed_attempts"] > 300
    assert figures["mismatches"] == {}
    assert set(figures["steps_truth"]) == {"retry", "reset_gpu", "exclude_nodes", "stop"}


@pytest.mark.parametrize(
    "name",
    [
        "chains",
        "chains_recovered",
        "manual_sessions",
        "manual_trained",
        "median_downtime_auto_h",
        "median_downtime_manual_h",
        "exclusions_last_window",
        "top3_share_last_window",
        "top3_last_window",
        "xid_above_peers",
        "returned_after_xid",
    ],
)
def test_the_advisors_figures_equal_the_truth(figures, name):
    advised, truth = figures[name]
    assert advised == truth


def test_chronic_nodes_are_the_flaky_ones(figures):
    """Every node called chronic is one of the three flaky nodes, and at least two of them
    are called (a flaky node that failed little in a fortnight need not be)."""
    flagged, flaky = figures["chronic_nodes"]
    assert set(flagged) <= set(flaky) and len(flagged) >= 2


def test_exclusions_concentrate_on_the_flaky_nodes(figures):
    assert figures["top3_share_whole_run"] > 0.5  # the report: top 3 of 63 took over half
