//! (to be written: the zfp codec)
