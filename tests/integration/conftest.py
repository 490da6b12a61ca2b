"""Fixtures the integration tests share (pytest finds this file itself)."""
import pytest

from daemon_support import CGROUP_ROOT, remove_cgroup_root


@pytest.fixture
def state_dir(tmp_path):
    """A daemon's state directory, in the test's own temporary one; the
    daemons' cgroup root (made under cordon's test root) goes after."""
    yield tmp_path / "state"
    remove_cgroup_root(CGROUP_ROOT)
