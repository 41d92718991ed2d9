//! Messages between simulated clients and the simulated etcd server, sent
//! as typed madsim payloads (no serialisation).

use coord::EtcdError;
use coord_core::kv::WatchEvent;

/// Tag on which the server receives requests.
pub const REQUEST_TAG: u64 = 1;

/// A request and the tag to answer on.
#[derive(Debug, Clone)]
pub struct Envelope {
    /// Tag the reply goes to (unique per client endpoint).
    pub reply_tag: u64,
    /// Which client process sent it (for the recorder).
    pub client: u64,
    /// The request.
    pub request: Request,
}

/// What a client can ask.
#[derive(Debug, Clone)]
pub enum Request {
    /// Grant a lease.
    Grant {
        /// TTL asked, seconds.
        ttl: i64,
    },
    /// Revoke a lease.
    Revoke {
        /// The lease.
        lease: i64,
    },
    /// A transaction.
    Txn {
        /// The transaction.
        txn: coord_core::io::Txn,
    },
    /// A read (consistency does not matter with one simulated member).
    Range {
        /// What to read.
        request: coord_core::io::RangeRequest,
    },
    /// Open a watch of `key` (every key under it, with `prefix`) from
    /// `start_revision`; messages go to the `stream` tag.
    Watch {
        /// The key or prefix.
        key: Vec<u8>,
        /// Every key under `key`.
        prefix: bool,
        /// First revision wanted.
        start_revision: i64,
        /// Tag of the stream.
        stream: u64,
    },
    /// End a watch.
    CancelWatch {
        /// Tag of the stream.
        stream: u64,
    },
    /// Ask an open watch for a progress notification.
    WatchProgress {
        /// Tag of the stream.
        stream: u64,
    },
    /// One keep-alive on a stream; `open` for the first one.
    KeepAlive {
        /// The lease.
        lease: i64,
        /// The stream's tag: replies go there.
        stream: u64,
        /// True for the request that opens the stream.
        open: bool,
    },
}

/// A unary reply.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A lease was granted.
    Granted {
        /// Its id.
        lease: i64,
        /// TTL granted.
        ttl: i64,
    },
    /// Done.
    Done,
    /// A transaction's result.
    Txn(coord_core::io::TxnResponse),
    /// A range's result.
    Listed(coord_core::io::Listing),
    /// Failed.
    Failed(EtcdError),
}

/// A message on a keep-alive stream, numbered so the client can deliver
/// them in order (madsim may reorder same-tag messages).
#[derive(Debug, Clone)]
pub struct StreamMessage {
    /// Position in the stream, from 0.
    pub seq: u64,
    /// The content.
    pub body: StreamBody,
}

/// Content of a stream message.
#[derive(Debug, Clone)]
pub enum StreamBody {
    /// A keep-alive reply: remaining TTL (0: lease gone).
    Ttl(i64),
    /// The server dropped the stream (leader change); nothing follows.
    Broken(String),
    /// A watch was created.
    WatchCreated {
        /// Header revision.
        revision: i64,
        /// Header cluster id.
        cluster: u64,
    },
    /// Watch events.
    WatchEvents {
        /// The events.
        events: Vec<WatchEvent>,
        /// Header revision.
        revision: i64,
        /// Header cluster id.
        cluster: u64,
    },
    /// Every event up to `revision` was sent.
    WatchProgress {
        /// Header revision.
        revision: i64,
        /// Header cluster id.
        cluster: u64,
    },
    /// The watch's start revision is compacted; nothing follows.
    WatchCompacted {
        /// etcd's compaction revision.
        compact_revision: i64,
    },
}
