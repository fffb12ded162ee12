//! The position-mode command fields, and the "a scalar or one value per servo" arguments
//! `Robot.cycle` and `Agent.command` take for them.
//!
//! What it is for: one reading of a field argument — absent, one number for every servo, or
//! one number per servo copied out — shared by [`crate::robot`] and [`crate::agent`]. Each
//! caller words the [`Refusal`] in its own terms (its messages name its own API), and checks
//! the numbers (ranges, NaN) itself: only type and shape are read here.
//!
//! What it must never do: panic on any Python object, or write past the servos asked for.

use numpy::{BorrowError, PyArray1, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyFloat, PyInt, PyString};

/// The position-mode fields the Python API takes: the first ten of the agent protocol's
/// fourteen, in its bit order, which is moteus' register order (0x020..=0x029). The
/// overrides and `ilimit_scale` are left out on purpose: they bypass the servo's control
/// loop, which a robot-wide call should not make one keyword away.
pub const FIELDS: usize = 10;

/// The field names, as the keyword arguments spell them: the first [`FIELDS`] of moteus'
/// position-command table ([`rtloop_proto::register::POSITION_COMMAND`]).
pub const NAMES: [&str; FIELDS] = {
    let mut names = [""; FIELDS];
    let mut i = 0;
    while i < FIELDS {
        names[i] = rtloop_proto::register::POSITION_COMMAND[i].name;
        i += 1;
    }
    names
};

/// The register of each field (same table): its scale class decides what an integer
/// resolution carries.
pub const REGISTERS: [u16; FIELDS] = {
    let mut registers = [0; FIELDS];
    let mut i = 0;
    while i < FIELDS {
        registers[i] = rtloop_proto::register::POSITION_COMMAND[i].register;
        i += 1;
    }
    registers
};

/// `POSITION_FIELDS` of the extension module: `(register, name, scale class)` of every
/// position-mode register, in register order, for the Python package and its tests.
pub fn position_fields() -> Vec<(u16, &'static str, String)> {
    rtloop_proto::register::POSITION_COMMAND
        .iter()
        .map(|c| (c.register, c.name, format!("{:?}", c.class).to_lowercase()))
        .collect()
}

/// How one field argument was given.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Given {
    /// Not given (or None): not sent.
    Absent,
    /// One number for every servo.
    Scalar(f64),
    /// One number per servo, written to the caller's buffer.
    PerServo,
}

/// Why a field argument is not numbers of the right shape (the caller words it).
#[derive(Debug)]
pub enum Refusal {
    /// Not numbers: a bool, a string, bytes, or (for [`number_or_sequence`]) nothing that
    /// converts to floats. The caller names the argument's type.
    NotNumbers,
    /// `numpy.asarray` refused it (for [`array_like`]); numpy's error.
    Unconvertible(PyErr),
    /// An array whose dtype is not real numbers; `str(dtype)`.
    Dtype(String),
    /// One value per servo, but this many values.
    Length(usize),
    /// An array of more than one dimension: its shape.
    Shape(Vec<usize>),
    /// The array is borrowed mutably elsewhere in Rust.
    Unreadable(BorrowError),
    /// Any other Python error on the way (an int too large for a float, …).
    Python(PyErr),
}

impl From<PyErr> for Refusal {
    fn from(e: PyErr) -> Self {
        Refusal::Python(e)
    }
}

/// `numpy.asarray`, imported once.
static ASARRAY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// Read a `Robot.cycle` field for `n` servos: a Python float or int, or anything
/// `numpy.asarray` converts to a real array of shape () or (n,); per-servo values go to
/// `out[..n]`; None is [`Given::Absent`]. Bools and strings are refused (numpy would make
/// numbers or text of them).
pub fn array_like(py: Python<'_>, value: &Bound<'_, PyAny>, n: usize, out: &mut [f64]) -> Result<Given, Refusal> {
    if value.is_none() {
        return Ok(Given::Absent);
    }
    if value.is_instance_of::<PyBool>() {
        return Err(Refusal::NotNumbers);
    }
    // The fast paths: a Python number, a numpy array.
    if let Ok(f) = value.cast::<PyFloat>() {
        return Ok(Given::Scalar(f.value()));
    }
    if value.is_instance_of::<PyInt>() {
        return Ok(Given::Scalar(value.extract::<f64>()?));
    }
    if value.is_instance_of::<PyString>() {
        return Err(Refusal::NotNumbers);
    }
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return array_values(array, n, out);
    }
    let asarray = ASARRAY.import(py, "numpy", "asarray")?;
    let array = asarray.call1((value,)).map_err(Refusal::Unconvertible)?;
    let array = array.cast_into::<PyUntypedArray>().map_err(|_| Refusal::NotNumbers)?;
    array_values(&array, n, out)
}

/// Read an `Agent.command` field for `n` servos: a number (anything Python converts to a
/// float), a real numpy array of shape () or (n,), or a sequence of `n` numbers; per-servo
/// values go to `out[..n]`; None is [`Given::Absent`]. Bools, strings and bytes are refused.
pub fn number_or_sequence(value: &Bound<'_, PyAny>, n: usize, out: &mut [f64]) -> Result<Given, Refusal> {
    if value.is_none() {
        return Ok(Given::Absent);
    }
    if value.is_instance_of::<PyBool>() || value.is_instance_of::<PyString>() || value.is_instance_of::<PyBytes>() {
        return Err(Refusal::NotNumbers);
    }
    if let Ok(array) = value.cast::<PyUntypedArray>() {
        return array_values(array, n, out);
    }
    if let Ok(v) = value.extract::<f64>() {
        return Ok(Given::Scalar(v));
    }
    let values = value.extract::<Vec<f64>>().map_err(|_| Refusal::NotNumbers)?;
    if values.len() != n {
        return Err(Refusal::Length(values.len()));
    }
    for (slot, v) in out.iter_mut().zip(values) {
        *slot = v;
    }
    Ok(Given::PerServo)
}

/// A numpy array of real numbers, of shape () (one number) or (n,) (copied to `out[..n]`
/// as float64; a float64 vector without a conversion).
fn array_values(array: &Bound<'_, PyUntypedArray>, n: usize, out: &mut [f64]) -> Result<Given, Refusal> {
    let dtype = array.dtype();
    if !matches!(dtype.kind(), b'f' | b'i' | b'u') {
        return Err(Refusal::Dtype(dtype.str().map_or_else(|_| "?".to_string(), |s| s.to_string())));
    }
    match array.shape() {
        [] => return Ok(Given::Scalar(array.extract::<f64>()?)),
        [len] if *len != n => return Err(Refusal::Length(*len)),
        [_] => {}
        dims => return Err(Refusal::Shape(dims.to_vec())),
    }
    let floats = match array.cast::<PyArray1<f64>>() {
        Ok(a) => a.clone(),
        Err(_) => {
            let py = array.py();
            array
                .call_method1(intern!(py, "astype"), (intern!(py, "float64"),))?
                .cast_into::<PyArray1<f64>>()
                .map_err(PyErr::from)?
        }
    };
    let floats = floats.try_readonly().map_err(Refusal::Unreadable)?;
    match floats.as_slice() {
        Ok(s) => {
            for (slot, v) in out.iter_mut().zip(s) {
                *slot = *v;
            }
        }
        Err(_) => {
            for (slot, v) in out.iter_mut().zip(floats.as_array().iter()) {
                *slot = *v;
            }
        }
    }
    Ok(Given::PerServo)
}
