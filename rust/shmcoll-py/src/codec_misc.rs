//! Bindings of the bq, cast and mpc codecs (shmcoll_codec::{bq, cast, mpc}).

use pyo3::prelude::*;

pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
