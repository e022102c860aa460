"""A module that ends the process importing it, as a broken task module might."""

raise SystemExit(3)
