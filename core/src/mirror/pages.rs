//! One listing of a prefix, read in pages that all see one revision: the
//! first page is read at the latest revision, every later one at that
//! revision (continuing after the last key seen), so a prefix larger than
//! one response (etcd's and the client's message limits), or one too big
//! to load etcd with in one range, is still one consistent snapshot.

use crate::ids::{ClusterId, Key, Revision};
use crate::io::{Consistency, Get, Listing, RangeRequest, Sort};
use crate::kv::KeyValue;

/// Why a listing is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListReason {
    /// The first listing.
    Initial,
    /// The watch's start revision was compacted (etcd's compact revision).
    Resync(Revision),
    /// A read-back at the reflected revision (this one) found another
    /// history.
    Diverged(Revision),
    /// A watch answered from behind the revision already reflected, or from
    /// another cluster: read linearizably to see whether etcd was restored
    /// or replaced.
    Check,
}

/// A listing being read, page by page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Pages {
    reason: ListReason,
    consistency: Consistency,
    /// Keys per page (halved when a page is too large).
    limit: u32,
    /// The first page's revision, pinned for the others (0 before it).
    revision: Revision,
    cluster: ClusterId,
    kvs: Vec<KeyValue>,
    /// The last key read: the next page starts after it.
    after: Option<Key>,
}

/// What a page leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PageStep {
    /// Read the next page.
    More,
    /// The listing is complete.
    Done(Listing),
    /// A later page came from another cluster than the first: start over.
    Restart,
}

impl Pages {
    /// A listing for `reason`, read `consistency`, `limit` keys per page.
    pub(super) fn new(reason: ListReason, consistency: Consistency, limit: u32) -> Pages {
        Pages {
            reason,
            consistency,
            limit: limit.max(1),
            revision: Revision(0),
            cluster: ClusterId::default(),
            kvs: Vec::new(),
            after: None,
        }
    }

    /// Why it is read.
    pub(super) fn reason(&self) -> ListReason {
        self.reason
    }

    /// How it is read.
    pub(super) fn consistency(&self) -> Consistency {
        self.consistency
    }

    /// The same listing from its first page again (its pinned revision
    /// was compacted, or another cluster answered), keeping the page size.
    pub(super) fn restarted(&self) -> Pages {
        Pages::new(self.reason, self.consistency, self.limit)
    }

    /// True once the first page pinned the revision.
    pub(super) fn pinned(&self) -> bool {
        self.revision != Revision(0)
    }

    /// The request for the next page of `prefix`.
    pub(super) fn request(&self, prefix: &Key) -> RangeRequest {
        RangeRequest {
            get: Get {
                key: prefix.clone(),
                prefix: true,
                sort: Sort::Key,
                limit: self.limit,
            },
            consistency: self.consistency,
            after: self.after.clone(),
            revision: self.revision,
        }
    }

    /// Halves the page size after a page too large to receive. False when
    /// it is one key already (nothing smaller to ask for).
    pub(super) fn shrink(&mut self) -> bool {
        if self.limit <= 1 {
            return false;
        }
        self.limit /= 2;
        true
    }

    /// Takes the next page.
    pub(super) fn take(&mut self, page: Listing) -> PageStep {
        if self.revision == Revision(0) {
            // The first page: its header revision is the one read at.
            self.revision = page.revision;
            self.cluster = page.cluster;
        } else if page.cluster.is_known() && self.cluster.is_known() && page.cluster != self.cluster
        {
            return PageStep::Restart;
        }
        // Keys after the last one only (a page never goes backwards).
        let after = self.after.take();
        let mut fresh = page
            .kvs
            .into_iter()
            .filter(|kv| after.as_ref().is_none_or(|a| kv.key > *a))
            .peekable();
        let had_any = fresh.peek().is_some();
        self.kvs.extend(fresh);
        self.after = self.kvs.last().map(|kv| kv.key.clone());
        if page.more && had_any {
            return PageStep::More;
        }
        PageStep::Done(Listing {
            count: u64::try_from(self.kvs.len()).unwrap_or(u64::MAX),
            kvs: std::mem::take(&mut self.kvs),
            revision: self.revision,
            more: false,
            cluster: self.cluster,
        })
    }
}
