//! The core of the loop, free of IO: the state saved with every checkpoint and the
//! recovery policies over it (breaker, withdrawal, stuck detection, approval rules).

pub mod policy;
pub mod state;
