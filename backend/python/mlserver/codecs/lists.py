"""Helpers for payloads that are a list of strings or a single string (mlserver.codecs.lists)."""


def is_list_of(payload, instance_type):
    return isinstance(payload, list) and all(isinstance(x, instance_type) for x in payload)


def as_list(payload):
    """A payload as an iterator: a single element is a list of one."""
    if isinstance(payload, (list, tuple)):
        yield from payload
    else:
        yield payload
