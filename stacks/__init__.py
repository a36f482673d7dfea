"""Stack configuration, fleet facts and the composition of the platform."""
