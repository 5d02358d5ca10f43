"""Debian packages the tests need (a PostgreSQL server, Chromium), installed by the tests themselves.

The README's one test command has to pass on a fresh machine, and `.ci/run` is
that same command, so whatever a test needs from the operating system is
installed here rather than in a separate set-up step. ``ensure_debian_packages``
installs the named packages with apt-get when they are missing: once per
machine (dpkg answers fast afterwards), under a file lock so that two test
processes do not run apt-get at once. Off Debian, or not as root, it raises
``SystemPackageError`` saying what to install by hand: a test that needs a
real server fails loudly instead of skipping, so CI never drops a kind of check.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

_LOCK = "/tmp/durably-tests-apt.lock"


class SystemPackageError(RuntimeError):
    """A Debian package a test needs is missing and cannot be installed here."""


def _installed(package: str) -> bool:
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True, text=True)
    return proc.returncode == 0 and "install ok installed" in proc.stdout


def ensure_debian_packages(*packages: str) -> None:
    """Install the Debian packages ``packages`` unless they already are.

    Args:
        packages: Debian package names, e.g. ``"postgresql"``, ``"chromium"``.

    Raises:
        SystemPackageError: not a Debian system, not root, or apt-get failed.
    """
    if shutil.which("dpkg-query") is None:
        raise SystemPackageError(f"not a Debian system: install {', '.join(packages)} by hand")
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = [p for p in packages if not _installed(p)]
        if not missing:
            return
        if os.geteuid() != 0:
            raise SystemPackageError(
                f"missing Debian packages {missing}: run `apt-get install {' '.join(missing)}` as root"
            )
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for argv in (
            ["apt-get", "update", "-q"],
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
        ):
            proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
            if proc.returncode != 0:
                raise SystemPackageError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
