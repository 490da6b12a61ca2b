"""Fixtures the integration tests share (pytest finds this file itself)."""
import pytest

from daemon_support import CGROUP_ROOT, remove_cgroup_root


@pytest.fixture
def state_dir(tmp_path):
    """A daemon's state directory, in the test's own temporary one; the
    daemons' cgroup root (made under cordon's test root) goes after."""
    yield tmp_path / "state"
    remove_cgroup_root(CGROUP_ROOT)
# The root goes once more as the run's process exits (daemon_support.probe
# registers that): a group whose last process was still being reaped when
# its test's fixture looked had kept it.
