//! Bindings of the zfp codec (shmcoll_codec::zfp).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
