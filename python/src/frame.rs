//! `rtloop.frame` from the native side: `rtloop frame encode` and `rtloop frame decode` as
//! functions.
//!
//! What it is for: building a moteus frame exactly as the moteus Python package sends it,
//! and taking any payload apart, with the very code the command uses
//! ([`rtloop::frame`]), so the two can never disagree — same bytes, same JSON, same error
//! messages.
//!
//! What it must never do: panic on user input. Every number is checked (by the command's own
//! range checks), and a bad payload comes back as a `ValueError` carrying the command's
//! one-sentence message.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use rtloop::frame::{self, CommandKind, EncodeRequest};
use rtloop_proto::host::PositionCommand;
use rtloop_proto::Resolution;
use serde_json::Value as Json;

/// Add this part's classes, functions and exceptions to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(frame_encode, m)?)?;
    m.add_function(wrap_pyfunction!(frame_decode, m)?)?;
    Ok(())
}

/// Build a frame as `rtloop frame encode KIND` does: returns `(arbitration_id, data)`, data
/// unpadded. `kind`: `position`, `query`, `stop` or `zero_velocity` (a dash works too).
/// Registers in revolutions, rev/s, rev/s², N·m and seconds; `resolution`: `int8`, `int16`,
/// `int32` or `float` for the command's registers (`None`: float, as moteus). Raises
/// `ValueError` with the command's message for anything it refuses.
#[pyfunction]
#[pyo3(signature = (
    kind, *, id = 1, position = None, velocity = None, feedforward_torque = None, kp_scale = None,
    kd_scale = None, maximum_torque = None, watchdog_timeout = None, velocity_limit = None,
    accel_limit = None, query = false, resolution = None
))]
#[allow(clippy::too_many_arguments)] // One keyword argument per `rtloop frame encode` flag.
fn frame_encode<'py>(
    py: Python<'py>,
    kind: &str,
    id: i64,
    position: Option<f64>,
    velocity: Option<f64>,
    feedforward_torque: Option<f64>,
    kp_scale: Option<f64>,
    kd_scale: Option<f64>,
    maximum_torque: Option<f64>,
    watchdog_timeout: Option<f64>,
    velocity_limit: Option<f64>,
    accel_limit: Option<f64>,
    query: bool,
    resolution: Option<&str>,
) -> PyResult<(u32, Bound<'py, PyBytes>)> {
    let kind = match kind.replace('-', "_").as_str() {
        "position" => CommandKind::Position,
        "query" => CommandKind::Query,
        "stop" => CommandKind::Stop,
        "zero_velocity" => CommandKind::ZeroVelocity,
        _ => {
            return Err(PyValueError::new_err(format!(
                "kind {kind:?} is not a command: give \"position\", \"query\", \"stop\" or \"zero_velocity\""
            )))
        }
    };
    // The command takes the id as a u8 and says the same for 0 and 128..=255; larger numbers
    // cannot reach it through its flag parser, but get the same sentence here.
    let id = u8::try_from(id)
        .map_err(|_| PyValueError::new_err(format!("--id {id} is not a servo id: give a number from 1 to 127")))?;
    let resolution = match resolution {
        None => None,
        Some("int8") => Some(Resolution::Int8),
        Some("int16") => Some(Resolution::Int16),
        Some("int32") => Some(Resolution::Int32),
        Some("float") => Some(Resolution::Float),
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "resolution {other:?} is not one: give \"int8\", \"int16\", \"int32\" or \"float\""
            )))
        }
    };
    let request = EncodeRequest {
        id,
        command: PositionCommand {
            position,
            velocity,
            feedforward_torque,
            kp_scale,
            kd_scale,
            maximum_torque,
            watchdog_timeout,
            velocity_limit,
            accel_limit,
            ..Default::default()
        },
        query,
        resolution,
    };
    let line = frame::encode(kind, &request).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (id_hex, data_hex) = line
        .split_once(' ')
        .ok_or_else(|| PyValueError::new_err(format!("internal error: the encoder wrote {line:?}")))?;
    let arbitration_id = u32::from_str_radix(id_hex, 16)
        .map_err(|_| PyValueError::new_err(format!("internal error: the encoder wrote the id {id_hex:?}")))?;
    // An empty payload cannot happen (every command writes its mode or a query), but
    // parse_hex refuses "" and would say so clearly.
    let data = frame::parse_hex(data_hex).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((arbitration_id, PyBytes::new(py, &data)))
}

/// Take a payload apart as `rtloop frame decode` does: `data` as bytes or as hex text (`0x`,
/// spaces, colons, dashes allowed); returns the command's JSON as a dict (`subframes`,
/// `registers` keyed `"0x001"`, and `invalid` when an integer register held a value it
/// cannot). Raises `ValueError` with the command's message for a malformed payload.
#[pyfunction]
fn frame_decode(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
    let text = if let Ok(bytes) = data.cast::<PyBytes>() {
        hex(bytes.as_bytes())
    } else if let Ok(s) = data.extract::<String>() {
        s
    } else if let Ok(b) = data.extract::<Vec<u8>>() {
        // bytearray, memoryview and other byte buffers.
        hex(&b)
    } else {
        return Err(pyo3::exceptions::PyTypeError::new_err(format!(
            "data must be bytes or a hex string, not {}: pass e.g. bytes.fromhex(\"2404000a\") or \"2404000a\"",
            data.get_type().name()?
        )));
    };
    let json = frame::decode(&text).map_err(|e| PyValueError::new_err(e.to_string()))?;
    json_to_py(py, &json)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A JSON value as the Python object `json.loads` would make of its text.
fn json_to_py(py: Python<'_>, value: &Json) -> PyResult<Py<PyAny>> {
    Ok(match value {
        Json::Null => py.None(),
        Json::Bool(b) => b.into_pyobject(py)?.to_owned().into_any().unbind(),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                i.into_pyobject(py)?.into_any().unbind()
            } else if let Some(u) = n.as_u64() {
                u.into_pyobject(py)?.into_any().unbind()
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any().unbind()
            }
        }
        Json::String(s) => s.into_pyobject(py)?.into_any().unbind(),
        Json::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any().unbind()
        }
        Json::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, json_to_py(py, v)?)?;
            }
            dict.into_any().unbind()
        }
    })
}
