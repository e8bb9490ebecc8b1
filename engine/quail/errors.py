class QuailError(Exception):
    """An error the user can fix: bad input, a bad parameter, or a model that cannot be found.

    Its message names the row, column or parameter at fault. A parameter is named as the Python API
    and pipeline files spell it (`arena_pages`), before any other use of that word in the message,
    and also given as `parameter`, so that a front end can say it in its own words: the CLI names
    its flag (`--arena-pages`).
    """

    def __init__(self, message: str, *, parameter: str | None = None):
        super().__init__(message)
        self.parameter = parameter
