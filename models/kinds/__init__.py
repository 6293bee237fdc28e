"""Model kinds (``tensor``, ``token-lm``, ``stream``, ``tree-policy``): see ``models.kinds.base``.

Registration: one line per kind module in ``KIND_MODULES``, imported on the first registry query.
"""
from edgesmith.models.kinds.base import Kind, KindOptions, Speed, get_kind, kind_names, option, register_kind

KIND_MODULES = (
    "edgesmith.models.kinds.tensor",  # tensor
    "edgesmith.models.kinds.token_lm",  # token-lm
    "edgesmith.models.kinds.stream",  # stream
    "edgesmith.models.kinds.tree_policy",  # tree-policy
)

__all__ = ["Kind", "KindOptions", "Speed", "get_kind", "kind_names", "option", "register_kind"]
