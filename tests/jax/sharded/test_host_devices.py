"""The child-process runner the 8-device checks share: reports collected as they come, a silent child
killed and restarted for the checks it has not reported (with a warning), a failing child failing."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.jax.sharded import host_devices

_CHILD = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, {repo!r})
    from tests.jax.sharded import host_devices
    checks = host_devices.start(4)
    import os
    for check in checks:
        if check == "stalls-once" and not os.path.exists({flag!r}):
            open({flag!r}, "w").close()
            time.sleep(60)
        if check == "fails":
            raise SystemExit("the child's own error")
        host_devices.report(check, flags=os.environ["XLA_FLAGS"])
''')


def _child(tmp_path: Path) -> Path:
    script = tmp_path / "child.py"
    script.write_text(_CHILD.format(repo=str(REPO), flag=str(tmp_path / "stalled")))
    return script


@pytest.mark.kernels_ci
def test_a_stalled_child_is_restarted_for_the_checks_left(tmp_path):
    with pytest.warns(UserWarning, match=r"no report for 2 s .* restarting for \['stalls-once', 'last'\]"):
        results = host_devices.run(sys.executable, _child(tmp_path), ["first", "stalls-once", "last"], stall_s=2)
    assert list(results) == ["first", "stalls-once", "last"]
    assert all("--xla_force_host_platform_device_count=4" in r["flags"] for r in results.values())


@pytest.mark.kernels_ci
def test_a_failing_child_fails_with_its_stderr(tmp_path):
    with pytest.raises(AssertionError, match="the child's own error"):
        host_devices.run(sys.executable, _child(tmp_path), ["first", "fails"], stall_s=30)
