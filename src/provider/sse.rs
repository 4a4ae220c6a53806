//! Server-sent events parsing (to be written).
