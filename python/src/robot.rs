//! (placeholder) the `robot` part of the Python package.

use pyo3::prelude::*;

/// Add this part's classes, functions and exceptions to the extension module.
pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
