"""Backup and recovery: portable archives (`archive`), import planning (`planning`), export and
import against a store (`transfer`) and whole-store removal (`destroy`). No CLI code lives here."""
