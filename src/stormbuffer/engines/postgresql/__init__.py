"""The PostgreSQL engine: records and their projection in one database with pgvector."""
