//! Telemetry (docs/observability.md) against real receivers: traces in Arize Phoenix,
//! the trace context at a command tool and an HTTP tool, and collectors that refuse or
//! hang.

mod phoenix;
mod prometheus;
mod propagation;
mod traces;
