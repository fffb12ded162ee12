pub use rtloop_rt::stats::*;
