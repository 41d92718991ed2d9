//! `coordctl campaign`, `leader` and `observe`: elections keyed as etcd's
//! Go `concurrency` package keys them (`NAME/<lease hex>`), so coordctl,
//! `etcdctl elect` and go-coord agents share one election.

use std::time::Duration;

use coord::{Election, Error, Leader, Leadership, Observe, Observed, SessionOptions};
use serde_json::Value;

use crate::cli::{Campaign, Global, Hold, Named};
use crate::exit::Failure;
use crate::guard::Guard;
use crate::output::{Printer, Record};
use crate::setup::{self, Signals};
use crate::supervise::{run_while_held, ttl_outlives, Ended, Guarded, HoldInfo};

/// The session options of a hold, checked as the library checks them (a
/// TTL or timeout out of range is bad input, before anything is dialled).
pub fn session_options(global: &Global, hold: &Hold) -> Result<SessionOptions, Failure> {
    let options = SessionOptions::default()
        .with_ttl(Duration::from_secs(hold.ttl))
        .with_request_timeout(global.command_timeout);
    options.validate()?;
    Ok(options)
}

/// Campaigns; once elected, leads until a signal (resign, `Ok(0)`), a loss
/// (`Failure::Lost`), or, with a command, until the command ends (its
/// status).
pub async fn campaign(
    global: &Global,
    args: &Campaign,
    signals: &mut Signals,
    printer: Printer,
) -> Result<u8, Failure> {
    let options = session_options(global, &args.hold)?;
    coord::validate_value(args.value.as_bytes())?;
    coord::validate_name(&args.name)?;
    let client = setup::connect(global).await?;
    let election = Election::new(client, &args.name, options).await?;
    printer.event(
        &Record::new("campaigning")
            .with("name", args.name.as_str())
            .with(
                "lease",
                election.session().lease_id().map(|l| l.to_string()),
            ),
    );
    let leadership = tokio::select! {
        won = election.campaign(args.value.as_bytes()) => won,
        number = signals.next() => {
            // Dropping the campaign withdrew it; the session goes too.
            let _ = election.close().await;
            return Ok(interrupted(&args.command, number));
        }
    };
    let leadership = match leadership {
        Ok(l) => l,
        Err(e) => {
            let _ = election.close().await;
            return Err(e.into());
        }
    };
    let result = hold_then_release(
        "elected",
        &args.name,
        leadership,
        &args.hold,
        &args.command,
        signals,
        printer,
    )
    .await;
    let _ = election.close().await;
    result
}

/// Prints `event` about `held`, holds it (see [`lead`]), then releases it
/// if it is still held: what `campaign` and `lock` do once they hold.
pub async fn hold_then_release(
    event: &'static str,
    name: &str,
    held: Leadership,
    hold: &Hold,
    command: &[String],
    signals: &mut Signals,
    printer: Printer,
) -> Result<u8, Failure> {
    printer.event(&held_record(event, name, &held));
    let result = lead(&held, hold, command, signals, printer).await;
    release(held, printer).await;
    result
}

/// Holds `held` until a signal, a loss or (with `command`) the command's
/// end. Shared by `campaign` and `lock`.
async fn lead(
    held: &Leadership,
    hold: &Hold,
    command: &[String],
    signals: &mut Signals,
    printer: Printer,
) -> Result<u8, Failure> {
    if command.is_empty() {
        return tokio::select! {
            loss = held.lost() => {
                let loss = loss.unwrap_or(coord::Loss::SessionClosed);
                printer.event(&Record::new("lost").with("reason", loss.to_string()));
                Err(Failure::Lost(loss))
            }
            _ = signals.next() => Ok(0),
        };
    }
    let info = HoldInfo {
        fence: held.token().0,
        key: held.key(),
    };
    let lost = async { held.lost().await.unwrap_or(coord::Loss::SessionClosed) };
    let guarded = Guarded {
        guard: Guard::start()?,
        keep: Vec::new(),
        outlives: Some(ttl_outlives(Duration::from_secs(hold.ttl))),
    };
    match run_while_held(command, &info, lost, hold.grace, guarded, signals, printer).await? {
        Ended::Exited(code) => Ok(code),
        Ended::Lost(loss) => Err(Failure::Lost(loss)),
    }
}

/// The status of a run ended by signal `number` before it held: 0 without
/// a command (nothing was asked but to hold until a signal), 128+N with
/// one (the command never ran).
pub fn interrupted(command: &[String], number: i32) -> u8 {
    if command.is_empty() {
        0
    } else {
        u8::try_from(128 + number).unwrap_or(255)
    }
}

/// Resigns (or unlocks) if still held, and says so.
async fn release(held: Leadership, printer: Printer) {
    if held.probe().has_ended() {
        return;
    }
    let released = held.resign().await;
    printer.event(&Record::new("released").with("confirmed", released.is_ok()));
}

/// What a holder prints about its hold.
fn held_record(event: &'static str, name: &str, held: &Leadership) -> Record {
    Record::new(event)
        .with("name", name)
        .with("key", held.key())
        .with("fence", held.token().0)
        .with("lease", held.lease().to_string())
}

/// Prints the leader of the election (nothing is written); `None` when
/// nobody leads.
pub async fn leader(global: &Global, args: &Named, printer: Printer) -> Result<(), Failure> {
    coord::validate_name(&args.name)?;
    let client = setup::connect(global).await?;
    let mut observe = Observe::start(client, &args.name)?;
    let first = first_observation(&mut observe, global.command_timeout).await;
    observe.close();
    let observed = first?;
    printer.event(&observed_record(&args.name, &observed));
    Ok(())
}

/// Prints the leader, then every change, until SIGINT or SIGTERM.
pub async fn observe(
    global: &Global,
    args: &Named,
    signals: &mut Signals,
    printer: Printer,
) -> Result<(), Failure> {
    coord::validate_name(&args.name)?;
    let client = setup::connect(global).await?;
    let mut observe = Observe::start(client, &args.name)?;
    let result = async {
        loop {
            tokio::select! {
                next = observe.next() => match next {
                    Some(observed) => printer.event(&observed_record(&args.name, &observed)),
                    None => return Err(Failure::from(Error::TaskGone)),
                },
                _ = signals.next() => return Ok(()),
            }
        }
    }
    .await;
    observe.close();
    result
}

async fn first_observation(observe: &mut Observe, within: Duration) -> Result<Observed, Failure> {
    match tokio::time::timeout(within, observe.next()).await {
        Ok(Some(observed)) => Ok(observed),
        Ok(None) => Err(Error::TaskGone.into()),
        Err(_) => Err(Error::Unreachable(coord::Cause::msg(format!(
            "no leader read within {within:?}"
        )))
        .into()),
    }
}

fn observed_record(name: &str, observed: &Observed) -> Record {
    let mut record = Record::new("leader")
        .with("name", name)
        .with("revision", observed.revision.0);
    if let Some(reason) = &observed.reset {
        // etcd's history started over: this revision may be below the
        // ones printed before.
        record = record.with("reset", format!("{reason:?}"));
    }
    match &observed.leader {
        None => record
            .with("key", Value::Null)
            .with("value", Value::Null)
            .with("fence", Value::Null),
        Some(Leader { key, value, token }) => record
            .with("key", key.to_string())
            .with("value", String::from_utf8_lossy(value).into_owned())
            .with("fence", token.0),
    }
}
