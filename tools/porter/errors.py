"""The one exception the port raises for anything a maintainer must fix."""


class PortError(Exception):
    """A recipe, artifact, drift or guard failure; the message names what and where."""
