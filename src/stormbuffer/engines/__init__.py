"""Storage engines behind one seam: the directory of Markdown files (with its SQLite projection) and PostgreSQL.

`projection` is the read side every engine supplies to retrieval; the ranking itself lives in `retrieval`.
"""
