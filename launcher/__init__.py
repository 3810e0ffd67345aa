"""pydyn's launcher.  Its records are dataclasses whose generated methods are compiled
once, not at every start (methodcache.py)."""

from .methodcache import install as _install_method_cache

_install_method_cache()
