//! (to be written: the cast codec)
