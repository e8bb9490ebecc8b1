class QuailError(Exception):
    """An error the user can fix: bad input, a bad parameter, or a model that cannot be found.

    Its message names the row, column or parameter at fault.
    """
