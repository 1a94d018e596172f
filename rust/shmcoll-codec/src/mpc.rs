//! (to be written: the mpc codec)
