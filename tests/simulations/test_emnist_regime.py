"""The EMNIST regime probe's smoke mode: every public pool gives a full table row (arms, noise arithmetic, timings),
and a style of the private writers is taken and named."""

from __future__ import annotations

import math

import pytest

from fedpub.config import ConfigError
from fedpub.simulations.reproductions.emnist_regime import HEADER, main


@pytest.mark.extended
@pytest.mark.parametrize("public", ["0.05", "heldout", "sklearn_digits"])
def test_quick_probe_prints_a_row_per_setting(public: str, capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = main(["--quick", "--public", public])
    assert set(HEADER) <= set(row)
    assert row["public"] == public and (row["writers"], row["m"], row["rounds"]) == (40, 5, 2)
    assert row["d"] == 7_850 and row["z"] > 0 and math.isclose(row["z·√d/m"], row["z"] * math.sqrt(7_850) / 5)
    for arm in ("private", "public-only", "non-private"):
        assert 0.0 <= row[arm] <= 1.0
    assert row["gate"] == ("pass" if row["private"] - row["public-only"] >= 0.01 else "fail")
    assert row["style"] == "default"
    assert "| emnist_softmax | 7850 |" in capsys.readouterr().out


@pytest.mark.extended
def test_quick_probe_takes_the_private_writers_style() -> None:
    (row,) = main(["--quick", "--style", "{ambiguous_fraction: 1.0, pixel_noise: 0.08, noisy_fraction: 0.5}"])
    assert row["style"] == "ambiguous_fraction 1, noisy_fraction 0.5"  # pixel_noise 0.08 is the default


def test_a_style_that_is_no_mapping_is_refused_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--quick", "--style", "hard"])
    assert "--style: a YAML mapping of data.synthetic's style fields is needed" in capsys.readouterr().err


def test_a_style_value_the_generator_cannot_take_is_refused_naming_the_field(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"data\.synthetic\.pixel_noise"):
        main(["--quick", "--style", "{pixel_noise: high}", "--data", str(tmp_path)])
