//! The faults a run injects: the schedule of a case (which faults, when,
//! on which process), generated from its seed, and the injector that does
//! them to the world.

pub mod fault;
pub mod inject;
pub mod schedule;
