"""``evobus --version`` prints the installed distribution's version."""

from __future__ import annotations

from importlib import metadata

import pytest

from evobus.agents.console.cli import DISTRIBUTION, main


def test_version_prints_the_installed_version_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"evobus {metadata.version(DISTRIBUTION)}\n"
