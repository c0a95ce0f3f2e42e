"""ts.metrics.dimension: a metric's dimension, a name and its value (TorchServe's Dimension)."""


class Dimension:
    def __init__(self, name, value):
        self.name = name
        self.value = value

    def __str__(self):
        return f"{self.name}:{self.value}"

    def __repr__(self):
        return f"Dimension({self.name!r}, {self.value!r})"

    def to_dict(self):
        return {"Name": self.name, "Value": self.value}
