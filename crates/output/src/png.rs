//! Plot support shared by the log plots and the lab's: the font and the PNG encoding.
//!
//! plotters is built without system font lookup (so it builds without fontconfig headers):
//! DejaVu Sans is loaded at runtime from its usual Debian path, once per process. Without it
//! a plot is drawn without text rather than not at all.

use std::io::Write;
use std::sync::OnceLock;

pub use ::png::EncodingError;

/// Where the plot font is looked for.
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// The font family plots use once [`font_available`] said yes.
pub const FONT_FAMILY: &str = "sans-serif";

/// Register the plot font with plotters, once per process; false if it could not be loaded.
pub fn font_available() -> bool {
    static LOADED: OnceLock<bool> = OnceLock::new();
    *LOADED.get_or_init(|| {
        let Ok(bytes) = std::fs::read(FONT_PATH) else { return false };
        // plotters keeps fonts for the life of the process and wants a 'static slice; this
        // runs at most once, so the leak is bounded.
        let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
        plotters::style::register_font(FONT_FAMILY, plotters::style::FontStyle::Normal, bytes).is_ok()
    })
}

/// Encode 8-bit RGB pixels (`width × height × 3` bytes, as plotters' bitmap backend draws
/// them) as a PNG into `out`.
pub fn encode_rgb(pixels: &[u8], (width, height): (u32, u32), out: impl Write) -> Result<(), EncodingError> {
    let mut encoder = ::png::Encoder::new(out, width, height);
    encoder.set_color(::png::ColorType::Rgb);
    encoder.set_depth(::png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(pixels)?;
    writer.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_encodes_to_a_png_of_its_size() {
        let (w, h) = (3u32, 2u32);
        let mut bytes = Vec::new();
        encode_rgb(&[200; 18], (w, h), &mut bytes).unwrap();
        let decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (w, h));
        // A buffer of the wrong size is an error, not a panic.
        assert!(encode_rgb(&[0; 5], (w, h), &mut Vec::new()).is_err());
    }
}
