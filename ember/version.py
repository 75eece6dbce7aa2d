"""ember's version, in the ground layer: artifacts and tuning records carry it (pyproject.toml says the same)."""

__version__ = "0.1.0"
