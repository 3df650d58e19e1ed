"""Storage engines behind one seam: the directory of Markdown files (with its SQLite projection) and PostgreSQL.

`base` is the record storage every engine supplies to the repository (read, write with
compare-and-swap, look up, one unit of work per write); `projection` is the read side every engine
supplies to retrieval. The rules (`core.repository`) and the ranking (`retrieval`) are written once.
"""
