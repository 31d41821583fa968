"""Naming rules of accounts, logs and partition names (entity groups), checked by the SDK
before a request leaves (the front end checks them again: the same rules, its own copy):

1. 3 to 63 characters: lowercase letters a-z, digits and hyphens;
2. starting and ending with a letter or a digit, with no two hyphens in a row;
3. never starting with "$": such names are the stamp's own, unreachable by any credential.

Every check returns the name or raises InvalidArgument naming the rule it breaks.
"""

from __future__ import annotations

import string

from stampsdk.errors import InvalidArgument

NAME_CHARS_MIN = 3
NAME_CHARS_MAX = 63
NAME_ALPHABET = frozenset(string.ascii_lowercase + string.digits + "-")
_ENDS = frozenset(string.ascii_lowercase + string.digits)
INTERNAL_MARK = "$"
PUBLIC_NAMES_LOW = "0"  # the smallest first character of a public name (rule 3)
PUBLIC_NAMES_HIGH = "{"  # the character after "z": above every public name
assert INTERNAL_MARK < PUBLIC_NAMES_LOW <= min(_ENDS) and max(_ENDS) < PUBLIC_NAMES_HIGH
NAME_SHOWN_CHARS_MAX = NAME_CHARS_MAX + 8  # a longer name is cut in messages
BAD_SHOWN_MAX = 16  # characters a refusal lists of those a name may not have

# Names found valid, remembered (a name's validity never changes; a refusal is not kept):
# the SDK and the front end check the same few names thousands of times a second.
NAMES_CACHED_MAX = 65_536
_valid: set[str] = set()

RULES = (f"{NAME_CHARS_MIN} to {NAME_CHARS_MAX} characters: lowercase letters a-z, digits "
         f"and single hyphens, starting and ending with a letter or a digit")


def check_name(kind: str, name: str) -> str:
    """`name` if it follows the rules above; else InvalidArgument naming the broken rule."""
    if type(name) is str and name in _valid:
        return name
    if not isinstance(name, str):
        raise InvalidArgument(f"{kind} name must be a string, not {type(name).__name__}")
    shown = shown_name(name)
    if name.startswith(INTERNAL_MARK):
        raise InvalidArgument(f"{kind} name {shown!r} starts with {INTERNAL_MARK!r}: such "
                              f"names are the stamp's own ({RULES})")
    if not NAME_CHARS_MIN <= len(name) <= NAME_CHARS_MAX:
        raise InvalidArgument(f"{kind} name {shown!r} has {len(name)} characters; a {kind} "
                              f"name has {NAME_CHARS_MIN} to {NAME_CHARS_MAX} ({RULES})")
    bad = sorted({c for c in name if c not in NAME_ALPHABET})
    if bad:
        raise InvalidArgument(f"{kind} name {shown!r} has characters other than lowercase "
                              f"letters, digits and hyphens: {''.join(bad[:BAD_SHOWN_MAX])!r} "
                              f"({RULES})")
    if name[0] not in _ENDS or name[-1] not in _ENDS:
        raise InvalidArgument(f"{kind} name {shown!r} starts or ends with a hyphen; it must "
                              f"start and end with a letter or a digit ({RULES})")
    if "--" in name:
        raise InvalidArgument(f"{kind} name {shown!r} has two hyphens in a row; hyphens "
                              f"are single ({RULES})")
    if len(_valid) >= NAMES_CACHED_MAX:
        _valid.clear()  # many distinct names: start over, stay bounded
    _valid.add(str(name))  # a str subclass is remembered as the plain str it equals
    return name


def shown_name(name: str) -> str:
    """`name` as a message shows it: cut to NAME_SHOWN_CHARS_MAX characters."""
    if len(name) <= NAME_SHOWN_CHARS_MAX:
        return name
    return name[:NAME_CHARS_MAX] + f"... ({len(name)} characters)"


def is_internal(name: str) -> bool:
    """Whether `name` is one the stamp keeps for itself (never reachable by the public API)."""
    return name.startswith(INTERNAL_MARK)


def check_account(name: str) -> str:
    """`name` if it is a valid account name (module rules); else InvalidArgument."""
    return check_name("account", name)


def check_log(name: str) -> str:
    """`name` if it is a valid log name (module rules); else InvalidArgument."""
    return check_name("log", name)


def check_partition(name: str) -> str:
    """`name` if it is a valid partition name (an entity group's; module rules); else
    InvalidArgument."""
    return check_name("partition", name)


def check_prefix(prefix: str) -> str:
    """A name prefix (of a shared access token): empty, or the start of some valid name:
    at most NAME_CHARS_MAX characters from the name alphabet, not starting with a hyphen,
    with no two hyphens in a row. It may end with a hyphen ("orders-" covers "orders-eu")."""
    if not isinstance(prefix, str):
        raise InvalidArgument(f"a name prefix must be a string, not {type(prefix).__name__}")
    if len(prefix) > NAME_CHARS_MAX:
        raise InvalidArgument(f"name prefix of {len(prefix)} characters is longer than any "
                              f"name ({NAME_CHARS_MAX})")
    bad = sorted({c for c in prefix if c not in NAME_ALPHABET})
    if bad:
        raise InvalidArgument(f"name prefix {prefix!r} has characters no name has: "
                              f"{''.join(bad)!r} ({RULES})")
    if prefix.startswith("-") or "--" in prefix:
        raise InvalidArgument(f"name prefix {prefix!r} starts no valid name: names start with "
                              f"a letter or a digit and have single hyphens ({RULES})")
    return prefix
