//! Probing a pid on this host: is it alive, and since when.

use coord_core::lock::PidProbe;
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// Probes `pid` with signal 0 (no signal is sent), and reads its start
/// time where it is alive.
pub(super) fn probe(pid: u32) -> PidProbe {
    // 0 and anything past i32 would mean a process group or nothing.
    let Some(raw) = i32::try_from(pid).ok().filter(|p| *p > 0) else {
        return PidProbe::Failed;
    };
    let probed = kill(Pid::from_raw(raw), None);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
    // A zombie (dead, not yet reaped by its parent) still answers signal
    // 0, but runs nothing and holds nothing: it counts as gone.
    if stat.as_deref().and_then(parse_state).is_some_and(is_dead) {
        return PidProbe::Gone;
    }
    match probed {
        Ok(()) => PidProbe::Alive {
            start_time: stat.as_deref().and_then(parse_start_time),
        },
        Err(Errno::ESRCH) => PidProbe::Gone,
        Err(Errno::EPERM) => PidProbe::Denied,
        Err(_) => PidProbe::Failed,
    }
}

/// When `pid` started (Linux: `/proc/<pid>/stat` field 22, clock ticks
/// since boot); `None` where that cannot be read.
pub(super) fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// The fields of a `/proc/<pid>/stat` line from field 3 on. The command
/// name (field 2) is in parentheses and may hold spaces and `)`: fields
/// resume after the last `)`.
fn fields_after_name(stat: &str) -> Option<std::str::SplitWhitespace<'_>> {
    Some(stat[stat.rfind(')')? + 1..].split_whitespace())
}

/// Field 22 of a `/proc/<pid>/stat` line: the start time.
fn parse_start_time(stat: &str) -> Option<u64> {
    fields_after_name(stat)?.nth(19)?.parse().ok()
}

/// Field 3 of a `/proc/<pid>/stat` line: the state (`R`, `S`, `Z`, ...).
fn parse_state(stat: &str) -> Option<char> {
    fields_after_name(stat)?.next()?.chars().next()
}

/// A zombie (`Z`) or dead (`X`, `x`) process.
fn is_dead(state: char) -> bool {
    matches!(state, 'Z' | 'X' | 'x')
}

/// This machine's host name, as markers record it; `unknown-host` if it
/// cannot be read or is not one line of text.
pub(super) fn this_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty() && !h.chars().any(|c| c.is_whitespace() || c.is_control()))
        .unwrap_or_else(|| "unknown-host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_time_is_field_22_whatever_the_command_name() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 987654 20 21";
        assert_eq!(parse_start_time(&format!("42 (sh) {tail}")), Some(987_654));
        assert_eq!(
            parse_start_time(&format!("42 (a) b (c)) {tail}")),
            Some(987_654)
        );
        assert_eq!(parse_start_time("42 (sh) S 1 2"), None);
        assert_eq!(parse_start_time("garbage"), None);
        assert_eq!(parse_state("42 (a) S (c)) Z 1 2"), Some('Z'));
        assert_eq!(parse_state("garbage"), None);
    }

    #[test]
    fn a_zombie_is_gone() {
        // A child that has exited but is not reaped yet: a zombie, which
        // answers signal 0.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let zombie = (0..500).any(|_| {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .as_deref()
                .and_then(parse_state);
            if state == Some('Z') {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            false
        });
        assert!(zombie, "the child never became a zombie");
        assert_eq!(
            kill(Pid::from_raw(i32::try_from(pid).unwrap()), None),
            Ok(())
        );
        assert_eq!(probe(pid), PidProbe::Gone);
        child.wait().unwrap();
    }

    #[test]
    fn this_process_is_alive_with_a_start_time_and_a_dead_pid_is_gone() {
        let me = std::process::id();
        let PidProbe::Alive { start_time } = probe(me) else {
            panic!("this process probed as {:?}", probe(me));
        };
        assert!(start_time.is_some(), "no start time on Linux");
        assert_eq!(start_time, super::start_time(me));
        // A child that has exited and been reaped: its pid is free.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(probe(pid), PidProbe::Gone);
        assert_eq!(probe(0), PidProbe::Failed);
        assert_eq!(probe(u32::MAX), PidProbe::Failed);
    }
}
