//! A lock with no etcd: marker files in a directory, judged by the holder's
//! pid on this host and by age elsewhere, with a fencing token per hold.
//! `Locker::flock`, `Locker::redis` and `Locker::postgres` have the same API.
//!
//! ```sh
//! cargo run --example file_lock              # in /tmp/coord-example-locks
//! LOCK_DIR=/var/lock/myapp cargo run --example file_lock
//! ```

use std::time::Duration;

use coord::lock::{FileConfig, LockError, Locker, Released};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::var("LOCK_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("coord-example-locks"));
    std::fs::create_dir_all(&dir)?;
    let locker = Locker::file(FileConfig::new(&dir))?;

    let mut holder = locker
        .acquire("nightly", Some(Duration::from_secs(60)))
        .await?;
    println!(
        "holding nightly in {} with token {}",
        dir.display(),
        holder.token().0
    );
    // ... pass holder.token() to what the lock protects; holder.lost() tells of a loss ...
    assert_eq!(holder.release().await?, Released::Released);

    match locker.try_acquire("nightly").await {
        Ok(held) => println!("free again: token {}", held.token().0), // released on drop
        Err(LockError::Locked) => println!("held by another process"),
        Err(e) => return Err(e.into()),
    }
    Ok(())
}
