

def test_a_string_where_a_list_belongs_is_named():
    import pytest

    from bot.actions.policy import PolicyError, _rule

    with pytest.raises(PolicyError, match=r'`kinds` is a list, e\.g\. \["clean"\]'):
        _rule({"kinds": "clean"}, 1)
