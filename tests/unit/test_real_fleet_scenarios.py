"""The real-fleet scenario library: each seed its own variation, evaluated with its own settings."""

from __future__ import annotations

import pytest

from streams.lab.simulator.real_fleet import FLEET_FAMILIES, QUIET_FLEET_DAYS
from streams.lab.simulator.scenarios import (
    REPORTING_SEEDS,
    SCENARIOS,
    TUNING_SEEDS,
    default_suite,
    get_scenario,
    scenario_names,
    scenarios,
)

FLEET = scenario_names("real-fleet")
SEEDS = TUNING_SEEDS[:12]


def test_real_fleet_scenarios_are_opt_in_by_tag() -> None:
    assert set(FLEET) >= {
        "fleet-quiet",
        "fleet-idle-spares",
        "fleet-scrape-timing",
        "fleet-checkpoint-cadence",
        "fleet-restart-load",
        "fleet-ha-pair",
        "fleet-label-layout",
        "fleet-xid",
        "fleet-xid-vanishing-label",
    }
    assert not set(FLEET) & {sc.name for sc in default_suite()}
    assert not set(FLEET) & set(scenario_names("must-not-page"))
    assert set(FLEET) <= set(scenario_names(include_long=True))


def test_the_library_scenarios_keep_grouping_by_train_job() -> None:
    for sc in default_suite():
        assert sc.settings_for(REPORTING_SEEDS[0]).group_labels == ["train_job"], sc.name


@pytest.mark.parametrize("name", FLEET)
def test_a_real_fleet_scenario_is_evaluated_with_the_settings_its_layout_calls_for(
    name: str,
) -> None:
    sc = get_scenario(name)
    for seed in SEEDS[:4]:
        config, settings = sc.config_for(seed), sc.settings_for(seed)
        assert config.metric_families == FLEET_FAMILIES
        if config.job_label is None:
            assert settings.group_labels == ["cluster"]
        else:
            assert settings.group_labels == [config.job_label, "cluster"]
        rows = sc.ground_truth(seed)
        faults = [r for r in rows if r.is_fault]
        assert bool(faults) == ("fail-stop" in sc.tags)
        assert all(r.xid_ms is not None and r.node in config.job_hosts for r in faults)


def test_each_seed_draws_its_own_variation_of_the_condition() -> None:
    spares = {get_scenario("fleet-idle-spares").config_for(s).spares for s in SEEDS}
    assert spares <= set(range(6)) and len(spares) >= 4
    timing = [get_scenario("fleet-scrape-timing").config_for(s) for s in SEEDS]
    assert all(c.scrape_offsets == "spread" and 100 <= c.scrape_jitter_ms <= 500 for c in timing)
    assert len({c.scrape_jitter_ms for c in timing}) == len(timing)
    cadences = [get_scenario("fleet-checkpoint-cadence").config_for(s) for s in SEEDS]
    assert all(20 * 60 <= c.checkpoint_interval_s <= 4 * 3600 for c in cadences)
    assert any(c.first_save_s is not None and c.first_save_s <= 60 for c in cadences)
    assert any(c.first_save_s is not None and c.first_save_s > 60 for c in cadences)
    loads = [get_scenario("fleet-restart-load").config_for(s) for s in SEEDS]
    assert all(5 * 60 <= c.restart_load_s <= 60 * 60 for c in loads)
    assert {c.restart_first_save_s is None for c in loads} == {True, False}
    layouts = [get_scenario("fleet-label-layout").config_for(s) for s in SEEDS]
    assert {c.job_label_layout for c in layouts} == {"all", "dcgm", "none"}
    assert {c.job_label for c in layouts} >= {"train_job", "hpc_job", None}
    assert {c.role_label for c in layouts} == {"pipeline_stage", None}
    assert all(get_scenario("fleet-ha-pair").config_for(s).replicas for s in SEEDS[:3])


def test_the_vanishing_label_scenario_always_has_a_job_label_that_vanishes() -> None:
    sc = get_scenario("fleet-xid-vanishing-label")
    for seed in SEEDS:
        config = sc.config_for(seed)
        assert config.job_label_vanishes_at_xid and config.job_label_layout in ("all", "dcgm")


def test_the_quiet_fleet_runs_for_days_with_planned_restarts_and_no_fault() -> None:
    sc = get_scenario("fleet-quiet")
    assert sc.duration_s == QUIET_FLEET_DAYS * 86_400 and QUIET_FLEET_DAYS >= 2
    rows = sc.ground_truth(REPORTING_SEEDS[0])
    assert not [r for r in rows if r.is_fault]
    assert len([r for r in rows if r.kind == "restart_load"]) == 2 * QUIET_FLEET_DAYS
    assert scenarios("real-fleet")[0].name == "fleet-quiet", "the longest run starts first"


def test_eleven_reporting_seeds_cover_thirty_group_days() -> None:
    node_days = sum(
        len(sc.config_for(s).hosts) * sc.duration_s / 86_400
        for sc in scenarios("real-fleet")
        for s in REPORTING_SEEDS[:11]
    )
    assert node_days / 60 >= 30, "11 reporting seeds cover at least 30 group-days"
    assert len(REPORTING_SEEDS) >= 11 and not set(REPORTING_SEEDS) & set(TUNING_SEEDS)
    assert all(name in SCENARIOS for name in FLEET)


@pytest.mark.parametrize(
    ("name", "layout", "replicas", "role", "vanishes"),
    [
        ("fleet-week", "none", False, None, False),
        ("fleet-week-gpu-labels", "dcgm", False, None, False),
        ("fleet-week-ha-pair", "none", True, None, False),
        ("fleet-week-roles", "all", False, "pipeline_stage", False),
        ("fleet-week-vanishing-label", None, False, None, True),
    ],
)
def test_the_acceptance_weeks_hold_three_xid_fail_stops_in_issue_8s_cluster(
    name: str, layout: str | None, replicas: bool, role: str | None, vanishes: bool
) -> None:
    sc = get_scenario(name)
    assert sc.duration_s == 7 * 86_400 and name not in FLEET
    for seed in REPORTING_SEEDS[:3]:
        config = sc.config_for(seed)
        assert (config.job_nodes, config.spares, config.scrape_offsets) == (60, 3, "spread")
        assert config.first_save_s is not None and config.first_save_s <= 60
        assert layout is None or config.job_label_layout == layout
        assert bool(config.replicas) == replicas and config.role_label == role
        assert config.job_label_vanishes_at_xid == vanishes
        faults = [r for r in sc.ground_truth(seed) if r.is_fault]
        days = sorted((r.xid_ms - config.start_ms) // 86_400_000 for r in faults)
        assert days == [1, 3, 5]
