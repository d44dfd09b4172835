"""One module per report section; each exposes ``run(ctx) -> list[Table]``."""
