//! A machine made of one mirror: the mirror's list-and-watch of a prefix,
//! and a [`MirrorReader`] that turns the mirror's changes into the
//! machine's own events. The host watcher ([`Watcher`](crate::watcher::Watcher))
//! and the leader observer ([`Observer`](crate::observer::Observer)) are
//! such machines; everything but their reading is written once, here.

use super::{Change, Mirror, MirrorStatus};
use crate::io::Command;
use crate::machine::{Input, StartError};
use crate::outbox::{Outbox, Output};
use crate::time::Instant;

/// How a machine made of one mirror reads the mirror's changes into its
/// own events.
pub trait MirrorReader: std::fmt::Debug {
    /// What the machine tells its user.
    type Event: std::fmt::Debug;

    /// Reads one change of `mirror`, in the order the mirror emitted it,
    /// and emits the machine's events for it, if any, in order.
    fn read(&mut self, mirror: &Mirror, change: Change, emit: &mut dyn FnMut(Self::Event));

    /// Every change the last input caused has been read: emits what waited
    /// for that (nothing, by default).
    fn drained(&mut self, _emit: &mut dyn FnMut(Self::Event)) {}
}

/// A machine made of one mirror and a reader of its changes: the mirror's
/// commands go out as they are, its changes go out as the reader's events.
#[derive(Debug)]
pub struct MirrorMachine<R: MirrorReader> {
    mirror: Mirror,
    out: Outbox<Command, R::Event>,
    reader: R,
}

impl<R: MirrorReader> MirrorMachine<R> {
    /// The machine of `mirror`, read by `reader`. Nothing happens until
    /// `Input::Start`.
    pub(crate) fn with(mirror: Mirror, reader: R) -> Self {
        MirrorMachine {
            mirror,
            out: Outbox::new(),
            reader,
        }
    }

    /// The mirror.
    pub(crate) fn mirror(&self) -> &Mirror {
        &self.mirror
    }

    /// The reader.
    pub(crate) fn reader(&self) -> &R {
        &self.reader
    }

    /// True once closed (terminal).
    pub fn is_closed(&self) -> bool {
        self.mirror.is_closed()
    }

    /// Whether what the machine reports is current, being re-read, or
    /// possibly stale because listing or watching keeps failing.
    pub fn status(&self) -> MirrorStatus {
        self.mirror.status()
    }

    /// The next command or event.
    #[must_use]
    pub fn poll(&mut self) -> Option<Output<Command, R::Event>> {
        self.out.pop()
    }

    /// True while waiting on etcd: listing, or a failure to list or watch
    /// not healed yet (see [`Input::Returned`]).
    pub fn awaits_etcd(&self) -> bool {
        self.mirror.awaits_etcd()
    }

    /// How many requests and streams were found unanswered so far.
    pub fn silences(&self) -> u64 {
        self.mirror.silences()
    }

    /// The next deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.mirror.poll_timeout()
    }

    /// Feeds one input. `Err` only for API misuse (a second `Start`).
    pub fn handle(&mut self, now: Instant, input: Input) -> Result<(), StartError> {
        self.mirror.handle(now, input, &mut self.out.ids)?;
        self.read();
        Ok(())
    }

    /// Passes the mirror's commands on and reads its changes, in order.
    fn read(&mut self) {
        let out = &mut self.out;
        while let Some(output) = self.mirror.poll() {
            match output {
                Output::Command(c) => out.cmd(c),
                Output::Event(change) => {
                    self.reader
                        .read(&self.mirror, change, &mut |e| out.event(e));
                }
            }
        }
        self.reader.drained(&mut |e| out.event(e));
    }
}

crate::machine::impl_machine!([R: MirrorReader] MirrorMachine<R>, Input, R::Event, StartError);
