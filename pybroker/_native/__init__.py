"""Compiled core modules (built from native/*.pyx). Select the pure twins with PYBROKER_IMPL=pure."""
