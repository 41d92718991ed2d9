//! The sampler: every [`SAMPLE_EVERY`], what each process says and what
//! etcd holds, side by side in the history.

use madsim::time::sleep;

use crate::history::{Condition, Entry, HostSample, WatcherSample, SAMPLE_EVERY};

use crate::etcd::server::lock;

use crate::world::fleet::{fleet, World};
use crate::world::hosts::host_key;

pub(crate) async fn sample_forever(w: World) {
    loop {
        let (hosts, watchers) = {
            let st = lock(&w.etcd);
            let f = fleet(&w.fleet);
            let hosts = f
                .hosts
                .iter()
                .enumerate()
                .map(|(i, slot)| {
                    let kv = st.model.get(host_key(i).as_bytes());
                    HostSample {
                        condition: slot.proc.condition,
                        status: match slot.proc.condition {
                            Condition::Crashed => None,
                            _ => slot.status.as_ref().map(|rx| rx.borrow().clone()),
                        },
                        key_lease: kv.map(|kv| kv.lease),
                        key_mod_revision: kv.map(|kv| kv.mod_revision),
                    }
                })
                .collect();
            let watchers = f
                .watchers
                .iter()
                .map(|slot| WatcherSample {
                    condition: slot.proc.condition,
                    view: slot.view.clone(),
                    says_current: slot
                        .status
                        .as_ref()
                        .map(|s| matches!(*s.borrow(), coord::ViewStatus::Watching { .. })),
                })
                .collect();
            (hosts, watchers)
        };
        w.record(Entry::Sample(hosts));
        w.record(Entry::WatcherSample(watchers));
        let contenders = {
            let st = lock(&w.etcd);
            crate::world::contenders::sample(&w, &st)
        };
        if !contenders.is_empty() {
            w.record(Entry::ContenderSample(contenders));
        }
        sleep(SAMPLE_EVERY).await;
    }
}
