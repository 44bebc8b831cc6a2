//! Changing with confidence (docs/testing-changes.md): recorded runs exported as test
//! cases and re-run against changed configuration (`replay`), and suites scored
//! against models (`suites`).

mod replay;
mod suites;
