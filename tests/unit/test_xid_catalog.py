"""XID catalog: shipped profiles, sub-status lookup, operator overrides, validation, loader."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from detectors.xid.actions import ACTIONS, SEVERITIES, action_rank, is_action
from detectors.xid.catalog import XidCatalog, XidEntry
from streams.catalog import load_xid_catalog, xid_catalog_data


def minimal(**xids: dict[str, Any]) -> dict[str, Any]:
    """Catalog data with one profile "p" holding ``xids`` (keys like x79 → "79")."""
    return {
        "profiles": {
            "p": {
                "unknown": {"severity": "warning", "action": "CONTACT_SUPPORT"},
                "xid": {k.lstrip("x"): v for k, v in xids.items()},
            }
        }
    }


# --------------------------------------------------------------------------- shipped profiles

NVIDIA_TABLE = [
    # IGNORE: 43, 63, 92
    (43, "IGNORE", "info"),
    (63, "IGNORE", "info"),
    (92, "IGNORE", "warning"),
    # RESTART_APP: 13, 31, 94
    (13, "RESTART_APP", "warning"),
    (31, "RESTART_APP", "warning"),
    (94, "RESTART_APP", "warning"),
    # RESET_GPU: 62, 64, 95, 119, 120, 140, 143
    (62, "RESET_GPU", "critical"),
    (64, "RESET_GPU", "critical"),
    (95, "RESET_GPU", "critical"),
    (119, "RESET_GPU", "critical"),
    (120, "RESET_GPU", "critical"),
    (140, "RESET_GPU", "critical"),
    (143, "RESET_GPU", "critical"),
    # RESTART_BM, CONTACT_SUPPORT on repeat
    (79, "RESTART_BM", "critical"),
    # workflows
    (48, "WORKFLOW_XID_48", "critical"),
    (74, "WORKFLOW_NVLINK_ERR", "critical"),
    (145, "WORKFLOW_NVLINK5_ERR", "warning"),
    (149, "WORKFLOW_NVLINK5_ERR", "critical"),
    # follows another XID
    (45, "IGNORE", "info"),
]


@pytest.mark.parametrize(("xid", "action", "severity"), NVIDIA_TABLE)
def test_nvidia_profile_follows_nvidia_buckets(nvidia, xid, action, severity):
    entry = nvidia.lookup(xid)
    assert (entry.action, entry.severity, entry.known) == (action, severity, True)
    assert entry.name and entry.text


REPORT_TABLE = [
    (31, "RESTART_APP"),
    (43, "RESTART_APP"),  # NVIDIA says IGNORE; the report retries
    (94, "RESTART_APP"),
    (119, "RESET_GPU"),
    (145, "RESET_GPU"),
    (149, "RESET_GPU"),
    (79, "CONTACT_SUPPORT"),  # NVIDIA says RESTART_BM first
]


@pytest.mark.parametrize(("xid", "action"), REPORT_TABLE)
def test_report_profile_follows_the_source_report(report, xid, action):
    assert report.lookup(xid).action == action


@pytest.mark.parametrize("xid", [13, 45, 48, 62, 74, 95, 140])
def test_report_profile_inherits_nvidia_for_codes_it_does_not_name(nvidia, report, xid):
    assert report.lookup(xid) == nvidia.lookup(xid)


def test_report_entries_keep_nvidia_names(nvidia, report):
    assert report.lookup(79).name == nvidia.lookup(79).name == "GPU has fallen off the bus"


def test_79_escalates_on_repeat_in_nvidia_profile(nvidia):
    assert nvidia.lookup(79).repeat_action == "CONTACT_SUPPORT"


@pytest.mark.parametrize("profile", ["nvidia", "report"])
@pytest.mark.parametrize("xid", [1, 2, 321, 999, 65535])
def test_unknown_xid_gets_the_conservative_default(profile, xid):
    entry = load_xid_catalog(profile).lookup(xid)
    assert (entry.xid, entry.known) == (xid, False)
    assert (entry.severity, entry.action) == ("warning", "CONTACT_SUPPORT")


@pytest.mark.parametrize("bad", [0, -1, True, "79", 79.0])
def test_lookup_rejects_non_xids(nvidia, bad):
    with pytest.raises(ValueError, match="XID"):
        nvidia.lookup(bad)


# --------------------------------------------------------------------------- sub-status

SUBSTATUS_TABLE = [
    # (xid, substatus, expected action, matched key)
    (145, None, "WORKFLOW_NVLINK5_ERR", None),
    (145, "Fatal", "RESET_GPU", "Fatal"),
    (145, "Fatal:RLW_REMAP:0:0x00000040", "RESET_GPU", "Fatal"),
    (145, "Nonfatal:RLW_CTRL:0:0x80000000", "IGNORE", "Nonfatal"),
    (145, "Nonfatal:RLW_REMAP:0:0x00000001", "RESTART_APP", "Nonfatal:RLW_REMAP"),
    (145, "Nonfatal:RLW_REMAP:0:0x00000100", "IGNORE", "Nonfatal:RLW_REMAP:0:0x00000100"),
    (145, "Nonfatal:RLW_SRC_TRACK:0:0x00000004", "RESTART_APP", None),
    (145, "Nonfatal:RLW_SRC_TRACK:0:0x00000002", "IGNORE", "Nonfatal"),
    (145, "Nonfatal:RLW_RXPIPE:0:0x00000008", "WORKFLOW_NVLINK5_ERR", "Nonfatal:RLW_RXPIPE"),
    (149, None, "WORKFLOW_NVLINK5_ERR", None),
    (149, "Fatal:NETIR_LINK_EVT:37:0x00000000", "RESET_GPU", "Fatal"),
    (149, "Fatal:NETIR_LINK_EVT:38:0x00000000", "IGNORE", "Fatal:NETIR_LINK_EVT:38"),
    (149, "Fatal:NETIR_LINK_DOWN:40:0x00000000", "IGNORE", "Fatal:NETIR_LINK_DOWN:40"),
    (149, "Nonfatal:NETIR_BER_EVENT:0:0x00000001", "IGNORE", "Nonfatal"),
    (149, "Something:else", "WORKFLOW_NVLINK5_ERR", None),  # no match: the XID's own entry
    (154, "NODE_REBOOT_REQUIRED", "RESTART_BM", "NODE_REBOOT_REQUIRED"),
    (154, "GPU_RESET_REQUIRED", "RESET_GPU", "GPU_RESET_REQUIRED"),
    (154, "NONE", "IGNORE", "NONE"),
    (79, "Fatal", "RESTART_BM", None),  # an XID without sub-status entries ignores it
]


@pytest.mark.parametrize(("xid", "substatus", "action", "matched"), SUBSTATUS_TABLE)
def test_substatus_lookup_falls_back_from_most_specific(nvidia, xid, substatus, action, matched):
    entry = nvidia.lookup(xid, substatus)
    assert entry.action == action
    if matched is not None:
        assert entry.substatus == matched


def test_substatus_lookup_is_case_and_space_insensitive(nvidia):
    a = nvidia.lookup(149, "Fatal:NETIR_LINK_EVT:38:0x00000000")
    b = nvidia.lookup(149, " fatal : netir_link_evt : 38 : 0X00000000 ")
    assert a == b and a.action == "IGNORE"


def test_substatus_entries_inherit_unset_fields_from_their_xid(nvidia):
    fatal = nvidia.lookup(145, "Fatal")
    assert fatal.name == nvidia.lookup(145).name
    assert fatal.xid == 145


def test_report_profile_drops_nvidia_substatus_refinements(report):
    """inherit_substatus = false: every 145/149 is a GPU reset in the report's mapping."""
    for sub in ("Nonfatal", "Fatal:NETIR_LINK_EVT:38:0x00000000", "Nonfatal:RLW_REMAP"):
        assert report.lookup(145, sub).action == "RESET_GPU"
        assert report.lookup(149, sub).action == "RESET_GPU"


def test_nvlink5_entries_carry_a_note_on_substatus(nvidia):
    for xid in (145, 149):
        assert "ub-status" in nvidia.lookup(xid).note


# --------------------------------------------------------------------------- overrides

OVERRIDE_TABLE = [
    # (override body, xid, substatus, expected (action, severity))
    ({"xid": {"43": {"action": "RESTART_APP"}}}, 43, None, ("RESTART_APP", "info")),
    ({"xid": {"94": {"severity": "critical"}}}, 94, None, ("RESTART_APP", "critical")),
    (
        {"xid": {"321": {"name": "New", "severity": "critical", "action": "RESET_GPU"}}},
        321,
        None,
        ("RESET_GPU", "critical"),
    ),
    (
        {"unknown": {"action": "RESET_GPU", "severity": "critical"}},
        999,
        None,
        ("RESET_GPU", "critical"),
    ),
    (
        {"xid": {"145": {"substatus": {"Nonfatal": {"action": "RESTART_APP"}}}}},
        145,
        "Nonfatal:RLW_CTRL",
        ("RESTART_APP", "info"),  # merged over the inherited sub-entry: severity kept
    ),
    (
        {"xid": {"145": {"substatus": {"Fatal:RLW_TAGSTATE": {"action": "CONTACT_SUPPORT"}}}}},
        145,
        "Fatal:RLW_TAGSTATE:0:0x00000002",
        ("CONTACT_SUPPORT", "warning"),  # new sub-entry: unset fields from the XID entry
    ),
    (
        {"xid": {"145": {"substatus": {"Fatal:RLW_TAGSTATE": {"action": "CONTACT_SUPPORT"}}}}},
        145,
        "Fatal:RLW_REMAP",
        ("RESET_GPU", "critical"),  # other inherited sub-entries stay
    ),
    (
        {"xid": {"149": {"action": "RESET_GPU", "inherit_substatus": False}}},
        149,
        "Fatal:NETIR_LINK_EVT:38",
        ("RESET_GPU", "critical"),
    ),
]


@pytest.mark.parametrize(("body", "xid", "substatus", "expected"), OVERRIDE_TABLE)
def test_overrides_merge_field_by_field_over_the_profile(body, xid, substatus, expected):
    catalog = XidCatalog.from_data(xid_catalog_data(), "nvidia", overrides=body)
    entry = catalog.lookup(xid, substatus)
    assert (entry.action, entry.severity) == expected


def test_override_can_clear_an_inherited_repeat_action():
    body = {"xid": {"79": {"repeat_action": ""}}}
    catalog = XidCatalog.from_data(xid_catalog_data(), "nvidia", overrides=body)
    assert catalog.lookup(79).repeat_action is None


def test_override_leaves_other_entries_alone(nvidia):
    body = {"xid": {"43": {"action": "RESTART_APP"}}}
    catalog = XidCatalog.from_data(xid_catalog_data(), "nvidia", overrides=body)
    assert {x: catalog.lookup(x) for x in nvidia.codes() if x != 43} == {
        x: nvidia.lookup(x) for x in nvidia.codes() if x != 43
    }


def test_override_applies_over_the_report_profile_too():
    body = {"xid": {"79": {"action": "RESTART_BM"}}}
    catalog = XidCatalog.from_data(xid_catalog_data(), "report", overrides=body)
    assert catalog.lookup(79).action == "RESTART_BM"
    assert catalog.lookup(43).action == "RESTART_APP"


# --------------------------------------------------------------------------- validation

INVALID_TABLE = [
    # (data or override, message fragment naming the entry)
    (minimal(x79={"severity": "critical", "action": "REBOOT"}), r"profile 'p' xid 79.*'REBOOT'"),
    (minimal(x79={"severity": "urgent", "action": "RESET_GPU"}), r"xid 79.*severity 'urgent'"),
    (minimal(x79={"severity": "critical"}), r"xid 79: no action"),
    (minimal(x79={"action": "RESET_GPU"}), r"xid 79: no severity"),
    (minimal(x79={"severity": "critical", "action": "RESET_GPU", "actoin": "x"}), r"actoin"),
    (
        minimal(x79={"severity": "critical", "action": "RESET_GPU", "repeat_action": "PANIC"}),
        r"xid 79.*repeat_action 'PANIC'",
    ),
    (minimal(abc={"severity": "info", "action": "IGNORE"}), r"XID keys are integers"),
    (minimal(x0={"severity": "info", "action": "IGNORE"}), r"XID keys are integers"),
    (minimal(x79={"severity": "info", "action": 3}), r"xid 79: action must be a string"),
    (
        minimal(
            x145={
                "severity": "info",
                "action": "IGNORE",
                "substatus": {"Fatal": {"action": "RESTART"}},
            }
        ),
        r"xid 145 substatus 'Fatal'.*'RESTART'",
    ),
    (
        minimal(
            x145={"severity": "info", "action": "IGNORE", "substatus": {"a::b": {}}},
        ),
        r"empty part",
    ),
    ({"profiles": {}}, r"no \[profiles"),
    ({"profiles": {"p": {}}, "extra": 1}, r"top-level"),
    ({"profiles": {"p": {"xid": {}, "colour": "red"}}}, r"profile 'p'.*colour"),
    ({"profiles": {"p": {"extends": "q"}, "q": {"extends": "p"}}}, r"extends itself"),
    ({"profiles": {"p": {"extends": "missing"}}}, r"unknown XID profile 'missing'"),
    ({"profiles": {"p": {"xid": {}}}}, r"unknown: no severity"),
]


@pytest.mark.parametrize(("data", "message"), INVALID_TABLE)
def test_invalid_catalog_data_raises_value_error_naming_the_entry(data, message):
    with pytest.raises(ValueError, match=message):
        XidCatalog.from_data(data, "p")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"xid": {"79": {"action": "REBOOT_NOW"}}}, r"overrides xid 79.*'REBOOT_NOW'"),
        ({"xid": {"321": {"action": "RESET_GPU"}}}, r"overrides xid 321: no severity"),
        ({"extends": "report"}, r"overrides.*extends"),
        ({"xid": {"79": {"inherit_substatus": "no"}}}, r"inherit_substatus"),
    ],
)
def test_invalid_override_names_overrides_and_the_entry(override, message):
    with pytest.raises(ValueError, match=message):
        XidCatalog.from_data(xid_catalog_data(), "nvidia", overrides=override)


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown XID profile 'acme'; known: nvidia, report"):
        load_xid_catalog("acme")


@pytest.mark.parametrize("name", [*ACTIONS, "WORKFLOW_XID_48", "WORKFLOW_NVLINK5_ERR"])
def test_every_bucket_name_is_an_action(name):
    assert is_action(name)
    assert action_rank(name) >= 0


@pytest.mark.parametrize("name", ["", "ignore", "WORKFLOW_", "WORKFLOW", "REBOOT", None, 3])
def test_other_names_are_not_actions(name):
    assert not is_action(name)


def test_action_order_runs_from_ignore_to_contact_support():
    order = ["IGNORE", "RESTART_APP", "RESET_GPU", "RESTART_VM", "RESTART_BM"]
    ranks = [action_rank(a) for a in order]
    assert ranks == sorted(ranks) and len(set(ranks)) == len(ranks)
    assert action_rank("RESTART_BM") < action_rank("WORKFLOW_NVLINK_ERR")
    assert action_rank("WORKFLOW_NVLINK_ERR") < action_rank("CONTACT_SUPPORT")
    with pytest.raises(ValueError, match="unknown action"):
        action_rank("REBOOT")


def test_entry_rejects_bad_values_directly():
    with pytest.raises(ValueError, match="severity"):
        XidEntry(1, "x", "fatal", "IGNORE")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="action"):
        XidEntry(1, "x", "info", "NOPE")


# --------------------------------------------------------------------------- shape, loader


@pytest.mark.parametrize("profile", ["nvidia", "report"])
def test_every_shipped_entry_is_valid_and_uses_known_names(profile):
    catalog = load_xid_catalog(profile)
    entries = [*catalog.entries.values(), catalog.unknown]
    entries += [e for subs in catalog.substatus.values() for e in subs.values()]
    for entry in entries:
        assert entry.severity in SEVERITIES
        assert is_action(entry.action)


@pytest.mark.parametrize("profile", ["nvidia", "report"])
def test_to_dict_round_trips_through_from_data_and_json(profile):
    catalog = load_xid_catalog(profile)
    body = json.loads(json.dumps(catalog.to_dict()))
    again = XidCatalog.from_data({"profiles": {profile: body}}, profile)
    assert again == catalog


def test_catalog_data_ships_inside_the_package():
    resource = resources.files("streams.catalog").joinpath("xid.toml")
    assert resource.is_file()
    assert set(xid_catalog_data()["profiles"]) == {"nvidia", "report"}


def test_loader_merges_an_operator_override_file(tmp_path: Path):
    path = tmp_path / "xid-overrides.toml"
    path.write_text(
        '[xid.43]\naction = "RESTART_APP"\n\n'
        '[xid.321]\nname = "Vendor XID"\nseverity = "critical"\naction = "RESET_GPU"\n\n'
        '[xid.145.substatus."Nonfatal:RLW_CTRL"]\naction = "RESTART_APP"\n',
        encoding="utf-8",
    )
    catalog = load_xid_catalog("nvidia", overrides=path)
    assert catalog.lookup(43).action == "RESTART_APP"
    assert catalog.lookup(321).name == "Vendor XID"
    assert catalog.lookup(145, "Nonfatal:RLW_CTRL:0:0x80000000").action == "RESTART_APP"
    assert catalog.lookup(79).action == "RESTART_BM"


def test_loader_names_the_file_on_invalid_toml(tmp_path: Path):
    path = tmp_path / "bad.toml"
    path.write_text("[xid.43\naction = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.toml: not valid TOML"):
        load_xid_catalog(overrides=path)


def test_loader_names_the_file_on_an_invalid_entry(tmp_path: Path):
    path = tmp_path / "typo.toml"
    path.write_text('[xid.79]\naction = "RESET_NODE"\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"typo\.toml: overrides xid 79.*RESET_NODE"):
        load_xid_catalog(overrides=str(path))


def test_loader_missing_override_file_raises_file_not_found(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        load_xid_catalog(overrides=tmp_path / "nope.toml")
