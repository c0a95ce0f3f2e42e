"""Label helpers of the built-in handlers: class indices and probabilities to the JSON TorchServe
answers ({label: probability} per request). ts.utils.util re-exports map_class_to_label, the
name user handlers import."""

import itertools


def map_class_to_label(probs, mapping=None, lbl_classes=None):
    """One dict per row of probs: {label: probability}, in the order of the row.

    probs: a list of rows (lists of probabilities, or of any values such as boxes);
    mapping: index_to_name.json as a dict {"3": "cat"}, or None to use the index as text;
    lbl_classes: the class index of each value, row by row; None means 0, 1, 2, ...
    """
    if not isinstance(probs, list):
        raise TypeError("map_class_to_label: convert the probabilities to a list first")
    if mapping is not None and not isinstance(mapping, dict):
        raise TypeError("map_class_to_label: the mapping must be a dict")
    if lbl_classes is None:
        lbl_classes = itertools.repeat(range(len(probs[0])) if probs else range(0), len(probs))
    results = []
    for classes, row in zip(lbl_classes, probs):
        out = {}
        for cls, value in zip(classes, row):
            key = str(cls)
            if mapping is not None:
                if key not in mapping:
                    raise KeyError(f"index_to_name.json has no label for class {key}")
                key = mapping[key]
            out[key] = value
        results.append(out)
    return results
