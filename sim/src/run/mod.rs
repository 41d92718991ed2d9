//! Running cases: one case's run and its verdict ([`runner`]), every seed
//! twice under two policies side by side ([`compare`]), and the seeds
//! pinned as regressions ([`pinned`]).

pub mod case;
pub mod compare;
pub mod pinned;
pub mod runner;
