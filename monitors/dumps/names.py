"""Dump names: a dump is named by the user, so a name is a plain file name or it is refused
(check_file_name): letters, digits, '.', '_', '-'; no separators, '..', NUL, drive letters, leading dot
or dash, Windows reserved names; bounded length. The errors of dumps are here too.
"""

from __future__ import annotations

import re

DUMP_SUFFIX = ".safetensors"
MAX_FILE_NAME_LENGTH = 160
MAX_DUMP_NAME_LENGTH = 100

_ALLOWED = re.compile(r"[A-Za-z0-9._-]+")
_RESERVED = (
    {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$", "CLOCK$"}
    | {f"COM{i}" for i in range(10)}
    | {f"LPT{i}" for i in range(10)}
)


class DumpError(Exception):
    """A dump could not be written, found or read; the message says why, for the user."""


class DumpNameError(DumpError):
    pass


class DumpTooLargeError(DumpError):
    pass


class DumpNotFoundError(DumpError):
    pass


class DumpCorruptError(DumpError):
    pass


def name_problem(name: object) -> str | None:
    """Why `name` is not a plain, safe file name on any OS; None when it is."""
    if not isinstance(name, str):
        return f"must be text, not {type(name).__name__}"
    if not name:
        return "is empty"
    if "\x00" in name:
        return "contains a NUL byte"
    if "/" in name or "\\" in name:
        return "contains a path separator"
    if ".." in name:
        return "contains '..'"
    if ":" in name:
        return "contains ':' (drive letter or stream)"
    if len(name) > MAX_FILE_NAME_LENGTH:
        return f"is longer than {MAX_FILE_NAME_LENGTH} characters"
    if not _ALLOWED.fullmatch(name):
        return "has characters other than letters, digits, '.', '_' and '-'"
    if name[0] in ".-":
        return "starts with '.' or '-'"
    if name.endswith("."):
        return "ends with '.'"
    if name.split(".")[0].upper() in _RESERVED:
        return f"is a reserved device name on Windows ({name.split('.')[0]})"
    return None


def check_file_name(name: object) -> str:
    problem = name_problem(name)
    if problem is not None:
        shown = repr(name)[:80]
        raise DumpNameError(
            f"Dump name {shown} refused: it {problem}. Use a plain file name such as 'my_latent' "
            "(letters, digits, '.', '_', '-'); dumps are always written to the dumps folder."
        )
    return name


def is_safe_file_name(name: object) -> bool:
    return name_problem(name) is None


def dump_file_name(name: object) -> str:
    """'my_latent' or 'my_latent.safetensors' -> 'my_latent.safetensors', or DumpNameError."""
    stem = name[: -len(DUMP_SUFFIX)] if isinstance(name, str) and name.endswith(DUMP_SUFFIX) else name
    check_file_name(stem)
    if len(stem) > MAX_DUMP_NAME_LENGTH:
        raise DumpNameError(f"Dump name refused: longer than {MAX_DUMP_NAME_LENGTH} characters.")
    return stem + DUMP_SUFFIX
