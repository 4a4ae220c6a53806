//! The SQLite store (to be written).
