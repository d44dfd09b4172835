"""The hot tier's protocol: one Lua file per script, the registry that reads them, and
the builders and parsers of their calls."""
