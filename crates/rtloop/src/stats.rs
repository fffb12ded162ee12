pub use rt::stats::*;
