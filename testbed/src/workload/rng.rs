//! SplitMix64: the only randomness in the testbed, so a seed fixes a whole run. The generator is
//! lb-common's; it is re-exported here so the testbed's callers keep one short path.

pub use lb_common::rng::SplitMix64;
