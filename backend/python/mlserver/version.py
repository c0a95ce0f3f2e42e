"""The version of MLServer's runtime contract this package follows."""
__version__ = "1.7.0"
