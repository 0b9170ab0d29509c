"""The JSON columns' text (orjson, the standard library behind it): what the standard encoder reads back as the same
value, what it refused still refused, what it wrote that was not JSON still read."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.foundation import jsontext
from bot.probing.probes.readings import Readings

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_what_it_writes_reads_back_as_the_same_value_both_ways(value):
    text = jsontext.dumps(value)
    assert json.loads(text) == value
    assert jsontext.loads(text) == value
    assert jsontext.loads(json.dumps(value)) == value  # the text written before, too


def test_what_orjson_does_not_take_goes_through_the_standard_encoder():
    assert json.loads(jsontext.dumps({"big": 2**70})) == {"big": 2**70}
    assert jsontext.dumps({1: "a", None: "b"}) == '{"1":"a","null":"b"}'  # keys made strings, as json.dumps does
    for refused in (datetime(2026, 1, 1, tzinfo=UTC), Readings.__new__(Readings), object()):
        with pytest.raises(TypeError):
            jsontext.dumps({"x": refused})


def test_a_nan_is_null_and_a_stored_nan_still_reads():
    assert jsontext.dumps({"power_w": float("nan"), "t": float("inf")}) == '{"power_w":null,"t":null}'
    stored = jsontext.loads('{"power_w": NaN}')
    assert stored["power_w"] != stored["power_w"]
    with pytest.raises(json.JSONDecodeError):
        jsontext.loads("{not json")
