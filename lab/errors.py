"""The one exception the lab raises for anything a user can fix.

Every failure a user can act on (bad argument, missing source, patch that does
not apply, guest that panics) is a LabError: the command line prints its
message on one line, prefixed with "lab:", and exits non-zero.  Anything else
is a bug in the lab and keeps its traceback.
"""


class LabError(Exception):
    """A failure with a one-line message that says what to do."""

    def __init__(self, message, exit_code=1):
        super().__init__(message)
        self.exit_code = exit_code
