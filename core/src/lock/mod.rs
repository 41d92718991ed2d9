//! The lock family's pure parts, shared by every backend of the driver's
//! `coord::lock`:
//! - [`name`]: which lock names are accepted (one rule for every backend:
//!   a name becomes a file name, an etcd key, a Redis key);
//! - [`marker`]: the marker file a file lock's holder writes, and its
//!   strict parser;
//! - [`verdict`](mod@verdict): what a marker found on disk means (held, dead, reused,
//!   stale, inconclusive), from the pid probe and the marker's age;
//! - [`table`]: an in-process lock table with slots and fencing tokens
//!   (the memory backend, and the model the other backends are tested
//!   against).

pub mod marker;
pub mod name;
pub mod table;
pub mod verdict;

pub use marker::{Marker, MarkerError};
pub use name::{validate_lock_name, LockNameError, MAX_LOCK_NAME_LEN};
pub use table::{Grant, LockTable, Released, Slots, SlotsError};
pub use verdict::{verdict, verdict_unreadable, PidProbe, Strategy, Verdict};
