//! What a leader asks of etcd on its user's behalf: proclaims and
//! transactions guarded by its token, and their answers.

use super::*;

impl Campaign {
    /// A proclaim (`value`) or a guarded transaction (`txn`), answered with
    /// `request`.
    pub(super) fn ask(&mut self, now: Instant, request: u64, asked: AskedBy, ids: &mut OpIds) {
        let (lease, token) = match &self.state {
            State::Leading { lease, token, .. } => (*lease, *token),
            _ => {
                self.event(ElectionEvent::Answered {
                    request,
                    answer: Answer::NotLeader,
                });
                return;
            }
        };
        let (asked, txn) = match asked {
            AskedBy::Proclaim(value) => {
                let txn = self.guarded_put(lease, token, value.clone());
                (Asked::Proclaim(value), txn)
            }
            AskedBy::Txn(user) => {
                let key = candidate_key(&self.name, lease);
                let txn = Txn {
                    compares: vec![Compare::create_revision(key, CompareOp::Equal, token)],
                    success: vec![TxnOp::Txn(Box::new(user))],
                    failure: Vec::new(),
                };
                (Asked::Txn, txn)
            }
        };
        self.send_request(now, request, asked, txn, ids);
    }

    pub(super) fn guarded_put(&self, lease: LeaseId, token: Revision, value: Vec<u8>) -> Txn {
        let key = candidate_key(&self.name, lease);
        Txn {
            compares: vec![Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                token,
            )],
            success: vec![TxnOp::Put { key, value, lease }],
            failure: Vec::new(),
        }
    }

    pub(super) fn send_request(
        &mut self,
        now: Instant,
        id: u64,
        asked: Asked,
        txn: Txn,
        ids: &mut OpIds,
    ) {
        let op = ids.next();
        self.cmd(Command::Txn { op, txn });
        self.requests.insert(
            op,
            Request {
                id,
                deadline: now + self.config.request_timeout,
                asked,
            },
        );
    }

    /// A proclaim or guarded transaction ended (`Unknown` also when its
    /// deadline passed).
    pub(super) fn answered(&mut self, _now: Instant, op: OpId, outcome: Outcome<TxnResponse>) {
        let Some(request) = self.requests.remove(&op) else {
            return;
        };
        let answer = match outcome {
            Outcome::Ok(resp) if !resp.succeeded => Answer::NotLeader,
            Outcome::Ok(resp) => match &request.asked {
                Asked::Proclaim(value) => {
                    self.value = value.clone();
                    Answer::Proclaimed
                }
                Asked::Refresh => Answer::Proclaimed,
                Asked::Txn => match resp.responses.into_iter().next() {
                    Some(TxnOpResponse::Txn(inner)) => Answer::Txn(inner),
                    _ => Answer::Failed(AttemptFailure::Etcd(crate::Failure::Other(
                        "a guarded transaction answered without its result".into(),
                    ))),
                },
            },
            failed => {
                Answer::Failed(AttemptFailure::of(&failed).unwrap_or(AttemptFailure::Timeout))
            }
        };
        if answer == Answer::NotLeader {
            // The guard failed: the key is gone or was recreated.
            self.lose_leadership();
        }
        if request.asked != Asked::Refresh {
            self.event(ElectionEvent::Answered {
                request: request.id,
                answer,
            });
        }
    }

    pub(super) fn lose_leadership(&mut self) {
        match std::mem::replace(&mut self.state, State::Done) {
            State::Leading { mirror, .. } | State::Queued { mirror, .. } => {
                self.close_mirror(mirror);
                self.event(ElectionEvent::Lost {
                    reason: Loss::KeyDeleted,
                });
            }
            other => self.state = other,
        }
    }
}
