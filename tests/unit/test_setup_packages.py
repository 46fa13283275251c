"""`make setup` (and so `make demo`) installs only what the framework needs; packages only the tests need come with
`make test`, and no package install starts or enables a service on the host (images/apt-install.sh; checked by
hand with a package that enables its unit: docs/RELIABILITY.md, security note)."""
from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _dry_run(target: str) -> str:
    return subprocess.run(["make", "-n", "-B", "--no-print-directory", "-C", str(REPO), target],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_setup_does_not_install_the_test_only_sshd():
    recipe = _dry_run(".venv/.installed")
    assert "images/apt-install.sh" in recipe and "iperf3" in recipe
    assert "openssh-server" not in recipe


def test_make_test_installs_it_through_the_no_service_installer():
    recipe = _dry_run("test")
    assert 'images/apt-install.sh "the test suite" openssh-server' in recipe
    assert recipe.index("the test suite") < recipe.index("pytest tests")


def test_the_installer_does_nothing_when_every_package_is_there():
    done = subprocess.run(["bash", str(REPO / "images/apt-install.sh"), "a check", "bash", "coreutils"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
