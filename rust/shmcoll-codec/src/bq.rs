//! (to be written: the bq codec)
