"""Tuning tables: the format (table.py), which one a communicator uses (lookup.py), and
`shmcoll tune`, which measures this machine and writes one (tuner.py)."""

from .lookup import ENV_FILE, Resolved, bind, resolve, system_files, user_file
from .table import fingerprint, load, model_document, validate

__all__ = [
    "ENV_FILE",
    "Resolved",
    "bind",
    "fingerprint",
    "load",
    "model_document",
    "resolve",
    "system_files",
    "user_file",
    "validate",
]
