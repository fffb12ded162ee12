//! `Renderer`: pictures of the simulated robot by MuJoCo's own offscreen renderer, headless
//! (EGL: a GPU's driver, or Mesa's software rasteriser), of the model a spine runs — the
//! built-in quadruped, a model file, or the one a run file (`rtloop run --config FILE`)
//! names — posed from a state's `body.qpos` (agent protocol section 2, `PoseBlock`).
//! What `rtloop.gym`'s `render_mode="rgb_array"` draws.
//!
//! Must never: be reached from a control loop (a frame takes milliseconds), or load EGL in a
//! program that made no `Renderer` (the library is opened when one is made).

use numpy::{PyArray1, PyArrayMethods, PyReadonlyArray1};
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use rtloop_physics::render::{Camera, RenderError, Renderer, MAX_SIDE};
use rtloop_physics::view::ModelView;
use rtloop_physics::ModelSource;
use std::path::PathBuf;

pyo3::create_exception!(
    rtloop,
    RenderUnavailable,
    PyRuntimeError,
    "MuJoCo's offscreen renderer cannot draw here: no OpenGL context through EGL (install \
     Mesa's EGL and software driver, Debian: apt install libegl1 libegl-mesa0 \
     libgl1-mesa-dri), or a frame could not be drawn."
);

/// The camera's defaults: from the robot's right side and a little above, following it.
const AZIMUTH_DEG: f64 = 90.0;
const ELEVATION_DEG: f64 = -20.0;

/// Which model file a run file (`rtloop run --config FILE`) simulates: `None` for the
/// built-in quadruped. Paths in the file are relative to its folder, as the run reads them.
fn model_of_run_file(py: Python<'_>, path: PathBuf) -> PyResult<Option<PathBuf>> {
    let shown = path.display().to_string();
    let text = py.detach(|| std::fs::read_to_string(&path)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err((
            libc::ENOENT,
            format!("the run file {shown} does not exist; give the file the spine runs with --config"),
            shown.clone(),
        )),
        _ => PyOSError::new_err((
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("cannot read the run file {shown}: {e}"),
            shown.clone(),
        )),
    })?;
    let (run, _motion) = rtloop::config::RunConfig::from_toml_with::<serde::de::IgnoredAny>(&text, "motion")
        .map_err(|e| PyValueError::new_err(format!("{shown}: {e}")))?;
    let run = run.relative_to(path.parent().unwrap_or(std::path::Path::new(".")));
    Ok(run.physics.and_then(|p| p.model))
}

fn render_error(e: RenderError) -> PyErr {
    match e {
        RenderError::Size { .. } => PyValueError::new_err(e.to_string()),
        other => RenderUnavailable::new_err(other.to_string()),
    }
}

/// An offscreen renderer of one model at one size: `render(qpos)` draws the model in that
/// pose and returns the picture.
#[pyclass(unsendable, module = "rtloop._rtloop", name = "Renderer")]
pub struct PyRenderer {
    view: ModelView,
    renderer: Renderer,
    width: u32,
    height: u32,
}

#[pymethods]
impl PyRenderer {
    /// `Renderer(model=None, *, config=None, width=480, height=480, azimuth=90, elevation=-20,
    /// distance=None, track=True)`: `model` a model file (MJCF or URDF), `config` a run file
    /// whose `[physics] model` to draw (neither: the built-in quadruped). The camera looks
    /// along `azimuth` (degrees, MuJoCo's: 90 from the robot's right side), from `elevation`
    /// (degrees, negative: from above), `distance` m away (default: from the model's size),
    /// following the model's first body (its base) with `track`, else fixed on where it starts.
    #[new]
    #[pyo3(signature = (model=None, *, config=None, width=480, height=480, azimuth=AZIMUTH_DEG, elevation=ELEVATION_DEG, distance=None, track=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: Option<&Bound<'_, PyAny>>,
        config: Option<&Bound<'_, PyAny>>,
        width: i64,
        height: i64,
        azimuth: f64,
        elevation: f64,
        distance: Option<f64>,
        track: bool,
    ) -> PyResult<Self> {
        let path_of = |v: &Bound<'_, PyAny>, what: &str| -> PyResult<PathBuf> {
            v.extract().map_err(|_| PyTypeError::new_err(format!("{what} must be a path (str or os.PathLike)")))
        };
        let file = match (model, config) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err(
                    "give either model= (a model file) or config= (the run file that names it), not both",
                ))
            }
            (Some(m), None) => Some(path_of(m, "model")?),
            (None, Some(c)) => model_of_run_file(py, path_of(c, "config")?)?,
            (None, None) => None,
        };
        let side = |v: i64, name: &str| -> PyResult<u32> {
            u32::try_from(v)
                .ok()
                .filter(|s| (1..=MAX_SIDE).contains(s))
                .ok_or_else(|| PyValueError::new_err(format!("{name} = {v}: give a size from 1 to {MAX_SIDE} pixels")))
        };
        let (w, h) = (side(width, "width")?, side(height, "height")?);
        for (name, v, range) in [("azimuth", azimuth, 360.0), ("elevation", elevation, 90.0)] {
            if !(v.is_finite() && v.abs() <= range) {
                return Err(PyValueError::new_err(format!("{name} = {v}: give degrees from -{range} to {range}")));
            }
        }
        if let Some(d) = distance {
            if !(d.is_finite() && (0.05..=1000.0).contains(&d)) {
                return Err(PyValueError::new_err(format!("distance = {d}: give metres from 0.05 to 1000")));
            }
        }
        let source = match file {
            Some(p) if !p.is_file() => {
                let shown = p.display().to_string();
                return Err(PyFileNotFoundError::new_err((
                    libc::ENOENT,
                    format!("the model file {shown} does not exist; give the MJCF or URDF file the spine simulates"),
                    shown,
                )));
            }
            Some(p) => ModelSource::File(p),
            None => ModelSource::BuiltIn,
        };
        let mut view = py.detach(|| ModelView::load(&source)).map_err(|e| PyValueError::new_err(e.to_string()))?;
        // The first body after the world: a robot's base.
        let base = (view.bodies().len() > 1).then_some(1);
        let lookat = base.map_or([0.0; 3], |b| view.poses()[b].position);
        let camera = Camera {
            lookat,
            distance: distance.unwrap_or(2.0 * view.extent()),
            azimuth,
            elevation,
            track: if track { base } else { None },
        };
        let renderer = Renderer::new(&mut view, w, h, camera).map_err(render_error)?;
        Ok(PyRenderer { view, renderer, width: w, height: h })
    }

    /// The model's generalised positions (MuJoCo's `nq`): the length `render` takes.
    #[getter]
    fn nq(&self) -> usize {
        self.view.nq()
    }

    /// The model: "the built-in quadruped", or the file as given.
    #[getter]
    fn model(&self) -> &str {
        self.view.name()
    }

    /// (width, height) in pixels.
    #[getter]
    fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// The model posed at `qpos` (MuJoCo's generalised positions, `nq` finite floats: a
    /// state's `body.qpos`), drawn: uint8 RGB, shape (height, width, 3), rows from the top.
    fn render<'py>(&mut self, py: Python<'py>, qpos: PyReadonlyArray1<'py, f64>) -> PyResult<Bound<'py, PyAny>> {
        let q = qpos.as_slice().map_err(|_| PyValueError::new_err("qpos must be a contiguous array of floats"))?;
        let nq = self.view.nq();
        if q.len() != nq {
            return Err(PyValueError::new_err(format!(
                "qpos has {} values but {} has nq = {nq}; give the body.qpos of a spine that simulates this model",
                q.len(),
                self.view.name()
            )));
        }
        if q.iter().any(|v| !v.is_finite()) {
            return Err(PyValueError::new_err("qpos holds NaN or infinite values; give finite positions"));
        }
        self.view.pose(q).ok_or_else(|| PyValueError::new_err("qpos could not pose the model"))?;
        let rgb = self.renderer.frame(&mut self.view).map_err(render_error)?;
        let (w, h) = (self.width as usize, self.height as usize);
        let flat = PyArray1::from_slice(py, rgb);
        Ok(flat.reshape([h, w, 3])?.into_any())
    }

    fn __repr__(&self) -> String {
        format!(
            "rtloop.Renderer(model={:?}, size={}x{}, nq={})",
            self.view.name(),
            self.width,
            self.height,
            self.view.nq()
        )
    }
}

/// Add `Renderer` and `RenderUnavailable` to the extension module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRenderer>()?;
    m.add("RenderUnavailable", m.py().get_type::<RenderUnavailable>())?;
    Ok(())
}
