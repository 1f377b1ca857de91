"""An S3-Rec attribute JSON (``{item: [attribute ids]}``) loads as the field ``attributes``, the name
the docs and the named Amazon datasets use, so ``--feature-columns attributes=multi`` declares it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from attnrec.cli.main import app
from attnrec.data.feature_files import read_features


def test_an_attribute_json_is_the_field_attributes(tmp_path: Path) -> None:
    attrs = tmp_path / "item2attributes.json"
    attrs.write_text(json.dumps({"a": [1, 2], "b": [2], "c": [3]}))
    assert list(read_features(attrs).fields) == ["attributes"]

    log = tmp_path / "log.csv"
    log.write_text(
        "user,item,timestamp\n" + "".join(f"u{u},{i},{t}\n" for u in range(4) for t, i in enumerate("abc"))
    )
    args = [
        "data",
        "--data",
        str(log),
        "--item-features",
        str(attrs),
        "--feature-columns",
        "attributes=multi",
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["features"]["item"]["fields"]["attributes"]["kind"] == "multi"
