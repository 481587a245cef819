"""Pure-Python twins of the native core: same functions, same errors, slower."""
