"""Tests written to kill the mutants that ``make mutate`` found surviving, one file per
module (docs/reliability.rst, "Mutation testing"), and the report of its score."""
