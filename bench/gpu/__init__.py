"""The prepared GPU check (check.sh), run on a lent CUDA machine."""
