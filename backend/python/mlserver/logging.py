"""mlserver.logging: the logger runtimes write to (its records reach the worker's log)."""
import logging

loggerName = "mlserver"
logger = logging.getLogger(loggerName)
