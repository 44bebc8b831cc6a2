//! Transition tests of the loop machine.
