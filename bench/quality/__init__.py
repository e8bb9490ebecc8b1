"""Answer quality of the embedded models on labelled data."""
