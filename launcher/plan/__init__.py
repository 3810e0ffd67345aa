"""Patch planning: how each probe site is patched, decided offline."""
