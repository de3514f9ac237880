"""Dataset converters to verl parquet."""
