"""A preset's promise names the speed settings it was measured with, and the preset sets them or the
promise says they are extra (``attnrec models MODEL`` prints the promise beside the settings)."""

from __future__ import annotations

import re

from attnrec.models.registry import get_spec, list_models

# Settings a promise's timing may depend on: how a promise names them, and the key the preset would set.
SPEED_SETTINGS = {
    r"amp=bf16|\bbf16\b": "amp",
    r"fast_dropout|FastDropout": "fast_dropout",
    r"threads=1": "threads",
}


def test_a_promise_naming_a_speed_setting_either_has_the_preset_set_it_or_says_it_is_extra() -> None:
    checked = 0
    for name in list_models():
        spec = get_spec(name)
        for preset, settings in spec.presets.items():
            text = spec.promise(preset)
            keys = {k for table in settings.values() for k in table}
            for pattern, key in SPEED_SETTINGS.items():
                if re.search(pattern, text) and key not in keys:
                    assert "does not set" in text or "sets none" in text, (name, preset, key)
                    checked += 1
    assert checked >= 3 * 3  # eSASRec's beauty, sports and toys each name all three


def test_the_esasrec_promises_give_the_flags_that_add_them() -> None:
    spec = get_spec("esasrec")
    for preset in ("beauty", "sports", "toys"):
        assert "--set amp=bf16 --set fast_dropout=true --set threads=1" in spec.promise(preset)
