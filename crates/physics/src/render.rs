//! Pictures of a posed model ([`crate::view::ModelView`]) with MuJoCo's own renderer, offscreen
//! and headless: an EGL context on the first EGL device that gives one (a GPU's, or Mesa's
//! software rasteriser, `llvmpipe`, which Debian's `libegl-mesa0` and `libgl1-mesa-dri`
//! ship), through mujoco-rs's `renderer` feature. No window system, no display.
//!
//! Must never: run on a control thread (a frame takes milliseconds), or be reached by a
//! program that did not ask for pictures (EGL is loaded only when a renderer is made).

use mujoco_rs::prelude::*;
use mujoco_rs::renderer::{MjRenderer, RendererError};

use crate::view::ModelView;

/// The largest picture side, pixels.
pub const MAX_SIDE: u32 = 4096;

/// Where the camera is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Camera {
    /// The point looked at, m (world frame); with `track`, the offset is kept from the
    /// tracked body instead.
    pub lookat: [f64; 3],
    /// Distance from the point looked at, m.
    pub distance: f64,
    /// Azimuth about +z, degrees: the camera looks along this heading (MuJoCo's: 0 looks
    /// along +x, 90 along +y, from the robot's right side).
    pub azimuth: f64,
    /// Elevation, degrees (negative: from above).
    pub elevation: f64,
    /// Follow this body (its index in [`ModelView::bodies`]) rather than stay fixed.
    pub track: Option<usize>,
}

/// Why no picture.
#[derive(Debug)]
#[non_exhaustive]
pub enum RenderError {
    /// A side of 0 or over [`MAX_SIDE`].
    Size {
        /// Width asked for.
        width: u32,
        /// Height asked for.
        height: u32,
    },
    /// No EGL device gave an OpenGL context (no libEGL, no Mesa driver, no GPU access).
    NoContext {
        /// EGL's (glutin's) reason.
        reason: String,
    },
    /// A frame could not be drawn or read back.
    Frame {
        /// MuJoCo's (mujoco-rs's) reason.
        reason: String,
    },
}

impl core::fmt::Display for RenderError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RenderError::Size { width, height } => write!(
                f,
                "a {width}x{height} picture: give a width and height from 1 to {MAX_SIDE} pixels, e.g. 640x480"
            ),
            RenderError::NoContext { reason } => write!(
                f,
                "MuJoCo's offscreen renderer found no OpenGL context through EGL ({reason}): install Mesa's EGL and \
                 software driver (Debian: apt install libegl1 libegl-mesa0 libgl1-mesa-dri) or a GPU driver with EGL"
            ),
            RenderError::Frame { reason } => write!(f, "MuJoCo could not draw the frame: {reason}"),
        }
    }
}

impl std::error::Error for RenderError {}

/// MuJoCo's offscreen renderer for one model, at one size.
pub struct Renderer {
    inner: MjRenderer,
    width: u32,
    height: u32,
}

impl core::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Renderer").field("width", &self.width).field("height", &self.height).finish_non_exhaustive()
    }
}

impl Renderer {
    /// An offscreen renderer of `view`'s model, `width` x `height` pixels, seen from `camera`.
    pub fn new(view: &mut ModelView, width: u32, height: u32, camera: Camera) -> Result<Renderer, RenderError> {
        if !(1..=MAX_SIDE).contains(&width) || !(1..=MAX_SIDE).contains(&height) {
            return Err(RenderError::Size { width, height });
        }
        let data = view.data_mut();
        // MuJoCo's offscreen buffer is as large as the model's visual settings say.
        let global = &mut data.model_vis_mut().global;
        global.offwidth = global.offwidth.max(width as i32);
        global.offheight = global.offheight.max(height as i32);
        let cam = MjvCamera {
            type_: match camera.track {
                Some(_) => MjtCamera::mjCAMERA_TRACKING as i32,
                None => MjtCamera::mjCAMERA_FREE as i32,
            },
            fixedcamid: -1,
            trackbodyid: camera.track.map_or(-1, |b| b as i32),
            lookat: camera.lookat,
            distance: camera.distance,
            azimuth: camera.azimuth,
            elevation: camera.elevation,
            ..MjvCamera::default()
        };
        let inner =
            MjRenderer::builder().width(width).height(height).camera(cam).build(data.model()).map_err(|e| match e {
                RendererError::GlutinError(g) => RenderError::NoContext { reason: g.to_string() },
                other => RenderError::Frame { reason: other.to_string() },
            })?;
        Ok(Renderer { inner, width, height })
    }

    /// Width, height in pixels.
    pub fn size(&self) -> (u32, u32) {
        (self.width, self.height)
    }

    /// Draw `view`'s model as its last [`ModelView::pose`] left it: RGB, 3 bytes a pixel,
    /// rows from the top.
    pub fn frame(&mut self, view: &mut ModelView) -> Result<&[u8], RenderError> {
        let frame_error = |e: RendererError| RenderError::Frame { reason: e.to_string() };
        self.inner.sync_data(view.data_mut()).map_err(frame_error)?;
        self.inner.render().map_err(frame_error)?;
        self.inner.rgb_flat().ok_or(RenderError::Frame { reason: "no RGB buffer".into() })
    }
}
