"""Kind options from KEY=VALUE flags: one value for a list option is a list of one."""
from __future__ import annotations

import pytest

from edgesmith.common import EdgesmithError


def test_a_single_value_for_a_list_option_is_a_list_of_one():
    from edgesmith.models.kinds.token_lm import TokenLmOptions

    # `--option bits=3 --option methods=rwkv-gptq` arrive as 3 and "rwkv-gptq": not a crash, not letters
    o = TokenLmOptions.from_dict({"bits": 3, "methods": "rwkv-gptq"})
    assert o.bits == (3,) and o.methods == ("rwkv-gptq",)
    assert TokenLmOptions.from_dict({"bits": [3, 4]}).bits == (3, 4)
    with pytest.raises(EdgesmithError, match="methods"):
        TokenLmOptions.from_dict({"methods": "gptq"})
