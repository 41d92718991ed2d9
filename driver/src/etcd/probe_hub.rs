//! What the handles of one client share to probe etcd: the [`ProbeHub`],
//! each loop's [`Member`]ship in it (its demand, and the news of etcd's
//! silence and return it is told), and the board the probing task writes
//! that news on. The task itself is the runtime's (`runtime::probe`); the
//! hub sits with the client that owns it.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use coord_core::probe::ProbeConfig;
use tokio::sync::watch;

/// The prober of one client, shared by every handle made from it (clones
/// share it). A handle given a client without one probes on its own.
#[derive(Debug, Clone)]
pub struct ProbeHub(pub(crate) Arc<Hub>);

/// What a client's handles and its probing task share.
#[derive(Debug)]
pub(crate) struct Hub {
    /// How many loops wait out a backoff now.
    pub(crate) demand: watch::Sender<usize>,
    /// What the probes found, told to every member.
    pub(crate) board: Mutex<Board>,
    /// Bumped each time a loop found etcd silent (a request or stream
    /// unanswered).
    pub(crate) silences: watch::Sender<u64>,
    pub(crate) started: AtomicBool,
    pub(crate) config: ProbeConfig,
}

impl Default for ProbeHub {
    fn default() -> Self {
        Self::new()
    }
}

impl ProbeHub {
    /// A hub with no task yet (it starts with the first loop), probing
    /// at most once a second (every 50 ms while refused).
    pub fn new() -> Self {
        Self::with_config(ProbeConfig::default())
    }

    /// A hub that probes as `config` says (the default: at most once a
    /// second, every 50 ms while the connection is refused, and a probe
    /// unanswered for a second counts as silence).
    pub fn with_config(config: ProbeConfig) -> Self {
        ProbeHub(Arc::new(Hub {
            demand: watch::channel(0).0,
            board: Mutex::new(Board {
                members: Vec::new(),
                silent: false,
            }),
            silences: watch::channel(0).0,
            started: AtomicBool::new(false),
            config,
        }))
    }

    /// A loop's membership: its demand, and the news of etcd's silence
    /// and return (a silence already found is told at once).
    pub(crate) fn member(&self) -> Member {
        let (tx, news) = watch::channel(None);
        let mut board = self
            .0
            .board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if board.silent {
            let _ = tx.send(Some(News::Silent));
        }
        board.members.retain(|member| !member.is_closed());
        board.members.push(tx);
        drop(board);
        Member {
            hub: Arc::clone(&self.0),
            waiting: false,
            news,
        }
    }
}

/// What a probe found, as a member is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum News {
    /// A probe went unanswered or was refused (see
    /// [`Input::Silent`](coord_core::machine::Input::Silent)).
    Silent,
    /// etcd answers again after a silence; the probe that found it back
    /// was sent then.
    Returned(tokio::time::Instant),
}

/// The members' wake-ups and the last news.
#[derive(Debug)]
pub(crate) struct Board {
    /// Each member's wake-up, in the order they joined. One channel per
    /// member: tasks waiting on one shared tokio `watch` wake in an order
    /// drawn from tokio's own unseeded RNG, which would make simulated
    /// runs differ from one process to the next.
    members: Vec<watch::Sender<Option<News>>>,
    /// Whether etcd was last found silent (a member joining then is told).
    silent: bool,
}

impl Board {
    /// Tells every member; forgets those that are gone.
    pub(crate) fn tell(&mut self, news: News) {
        self.silent = news == News::Silent;
        self.members
            .retain(|member| member.send(Some(news)).is_ok());
    }
}

/// One loop's side of a [`ProbeHub`].
pub(crate) struct Member {
    hub: Arc<Hub>,
    waiting: bool,
    news: watch::Receiver<Option<News>>,
}

impl Member {
    /// Whether the loop's machine waits on etcd now (`awaits_etcd`).
    pub(crate) fn set_waiting(&mut self, waiting: bool) {
        if waiting == self.waiting {
            return;
        }
        self.waiting = waiting;
        self.hub.demand.send_modify(|n| {
            *n = if waiting {
                n.saturating_add(1)
            } else {
                n.saturating_sub(1)
            };
        });
    }

    /// Completes with the next news: etcd found silent, or answering
    /// again after a silence. News that came faster than it was read is
    /// told once, as the latest.
    pub(crate) async fn news(&mut self) -> News {
        loop {
            if self.news.changed().await.is_err() {
                return std::future::pending().await;
            }
            if let Some(news) = *self.news.borrow_and_update() {
                return news;
            }
        }
    }

    /// The loop's machine found etcd silent.
    pub(crate) fn silence(&self) {
        self.hub.silences.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tell(hub: &ProbeHub, news: News) {
        hub.0
            .board
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .tell(news);
    }

    #[test]
    fn a_member_joining_is_told_a_silence_still_on_and_not_one_that_ended() {
        let hub = ProbeHub::new();
        let early = hub.member();
        assert_eq!(*early.news.borrow(), None);
        tell(&hub, News::Silent);
        let during = hub.member();
        assert_eq!(*during.news.borrow(), Some(News::Silent), "told at once");
        assert_eq!(*early.news.borrow(), Some(News::Silent));
        let at = tokio::time::Instant::now();
        tell(&hub, News::Returned(at));
        let after = hub.member();
        assert_eq!(
            *after.news.borrow(),
            None,
            "a silence that ended is not news to a loop joining after it"
        );
        assert_eq!(*during.news.borrow(), Some(News::Returned(at)));
    }
}
