"""Fixtures the integration tests share (pytest finds this file itself)."""
import pytest

from daemon_support import CGROUP_ROOT, remove_cgroup_root


@pytest.fixture
def state_dir(tmp_path):
    """A daemon's state directory, in the test's own temporary one; the
    daemons' cgroup root (made under cordon's test root) goes after."""
    yield tmp_path / "state"
    remove_cgroup_root(CGROUP_ROOT)


def pytest_sessionfinish(session, exitstatus):
    """The cgroup root once more at the end of the run: a group whose last
    process was still being reaped when its test's fixture looked (a kernel
    or a daemon ending) had kept it, and the empty root stayed behind."""
    remove_cgroup_root(CGROUP_ROOT)
