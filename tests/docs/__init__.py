"""The README and docs/ as a reader meets them: examples run, links lead somewhere."""
