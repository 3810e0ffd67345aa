"""The script front end: lexer, preprocessor, parser and syntax tree."""

from __future__ import annotations

from . import ast
from .parser import parse_script, recursion_headroom

__all__ = ["ast", "parse_script", "recursion_headroom"]
