"""[notify] in a profile and the daemon-wide file: URLs never shown, errors name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from airvisor.notify import (
    NotifyConfigError,
    default_file,
    load_default,
    redact_url,
    run_targets,
    scrub,
)
from airvisor.profile import ProfileError, load_profile
from airvisor.profile._schema import NotifySection

SECRET = "https://hooks.slack.com/services/T000/B000/sEcReTtOkEn"


def test_redaction_keeps_only_scheme_host_and_port() -> None:
    assert redact_url(SECRET) == "https://hooks.slack.com/…"
    assert redact_url("http://user:pw@127.0.0.1:8080/hook?token=abc") == "http://127.0.0.1:8080/…"
    assert redact_url("http://[::1]:9000") == "http://[::1]:9000"
    assert scrub(f"ConnectError for url '{SECRET}'", [SECRET]) == \
        "ConnectError for url 'https://hooks.slack.com/…'"


def test_profile_section_and_daemon_default_combine(tmp_path: Path) -> None:
    default = NotifySection.model_validate({"webhooks": [{"url": "http://127.0.0.1:1/a"}],
                                            "retries": 1})
    profile = {"notify": {"webhooks": [{"url": SECRET, "format": "slack", "name": "team",
                                        "events": ["failed"]}]}}
    targets = run_targets(profile, default)
    assert [(t.format, t.label, sorted(t.events), t.retries) for t in targets] == [
        ("slack", "team (https://hooks.slack.com/…)", ["failed"], 5),
        ("json", "http://127.0.0.1:1/…", ["failed", "gpu_wait", "needs_person", "recovered",
                                           "stalled", "succeeded"], 1)]
    assert SECRET not in repr(targets)
    alone = {"notify": {**profile["notify"], "use_daemon_default": False}}
    assert len(run_targets(alone, default)) == 1


def test_a_bad_url_in_a_profile_is_reported_without_the_url(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[run]\nname = "x"\noutput_dir = "out"\n[prime_rl]\nversion = "0.4"\n'
                    '[[notify.webhooks]]\nurl = "hooks.slack.com/services/sEcReTtOkEn"\n')
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    text = str(caught.value)
    assert "notify.webhooks" in text and "http:// or https://" in text and ":6" in text
    assert "sEcReTtOkEn" not in text


def test_daemon_default_file_errors_name_file_and_field(tmp_path: Path) -> None:
    path = default_file(tmp_path, env={})
    assert path == tmp_path / "notify.toml"
    assert load_default(path).webhooks == []  # absent: no default targets
    path.write_text('[notify]\nretries = -1\n[[notify.webhooks]]\nurl = "ftp://x/sEcReT"\n')
    with pytest.raises(NotifyConfigError) as caught:
        load_default(path)
    text = str(caught.value)
    assert f"{path}: notify.retries" in text and "notify.webhooks.0" in text
    assert "sEcReT" not in text
    path.write_text("[notfiy]\n")
    with pytest.raises(NotifyConfigError, match="unknown table"):
        load_default(path)
    assert default_file(tmp_path, env={"AIRVISOR_NOTIFY_FILE": "/etc/x.toml"}) == \
        Path("/etc/x.toml")
