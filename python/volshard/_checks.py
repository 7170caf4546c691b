"""Arguments checked as Python's own functions check them: a TypeError or
ValueError that names the function, the argument and the value, before the
extension sees it (pybind11 says "incompatible function arguments" and names
neither, and a path's NUL byte would end the path early in C++)."""

import os


def fspath(value, who, name="path"):
    """os.fspath(value), refusing what is not a path and a NUL byte, as open() does."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError(f"{who}: {name} must be a str or os.PathLike, not {type(value).__name__}") from None
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if "\0" in path:
        raise ValueError(f"{who}: {name}={path!r}: embedded null byte")
    return path


def options(cls, who, **fields):
    """A C++ options struct with these fields set (the rest keep their defaults);
    a value of the wrong type is refused naming the field and the type it takes."""
    result = cls()
    for name, value in fields.items():
        try:
            setattr(result, name, value)
        except TypeError:
            wanted = type(getattr(result, name)).__name__
            raise TypeError(f"{who}: {name}={value!r} must be of type {wanted}, not {type(value).__name__}") from None
    return result
