//! `coordctl lock`: `etcdctl lock NAME CMD` with fencing and the lost
//! signal.

use coord::{Error, Mutex};

use crate::cli::{Global, Lock};
use crate::elect::{hold_then_release, session_options};
use crate::exit::Failure;
use crate::output::{Printer, Record};
use crate::setup::{self, Signals};

/// Takes the lock (waiting, bounded by `--timeout`, or not at all with
/// `--try`), runs the command while holding it, releases it when the
/// command ends, and returns the command's status.
pub async fn run(
    global: &Global,
    args: &Lock,
    signals: &mut Signals,
    printer: Printer,
) -> Result<u8, Failure> {
    coord::validate_name(&args.name)?;
    let options = session_options(global, &args.hold)?;
    if args.command.is_empty() {
        return Err(Failure::Usage("no command given after --".into()));
    }
    let client = setup::connect(global).await?;
    let mutex = Mutex::new(client, &args.name, options).await?;
    printer.event(&Record::new("waiting").with("name", args.name.as_str()));
    let taken = tokio::select! {
        taken = async {
            if args.try_lock {
                mutex.try_lock().await
            } else if let Some(timeout) = args.timeout {
                mutex.lock_timeout(timeout).await
            } else {
                mutex.lock().await
            }
        } => taken,
        _ = signals.next() => Err(Error::Closed),
    };
    let guard = match taken {
        Ok(guard) => guard,
        Err(Error::Closed) => {
            let _ = mutex.close().await;
            return Ok(0);
        }
        Err(e) => {
            let _ = mutex.close().await;
            if matches!(e, Error::Locked | Error::Timeout) {
                printer.event(&Record::new("held").with("name", args.name.as_str()));
            }
            return Err(e.into());
        }
    };
    let result = hold_then_release(
        "locked",
        &args.name,
        guard,
        &args.hold,
        &args.command,
        signals,
        printer,
    )
    .await;
    let _ = mutex.close().await;
    result
}
