"""Where served files come from: the local root jail and its open-file cache."""
