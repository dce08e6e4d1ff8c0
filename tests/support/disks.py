"""Full disks for the tests that need one: a small tmpfs filled to its last page."""

from __future__ import annotations

import errno
from pathlib import Path


def fill(disk: Path) -> None:
    """Write until the file system has no page left."""
    with (disk / "filler").open("wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
