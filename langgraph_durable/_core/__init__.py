"""Sans-I/O core: keys, SQL, Lua, codec and the operations that drive both tiers."""
