//! Messages between simulated clients and the simulated etcd server, sent
//! as typed madsim payloads (no serialisation).

use coord::EtcdError;

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
    /// Compare-and-put: write unless the key has this value and lease.
    PutIfChanged {
        /// Key.
        key: Vec<u8>,
        /// Value.
        value: Vec<u8>,
        /// Lease.
        lease: i64,
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
}
