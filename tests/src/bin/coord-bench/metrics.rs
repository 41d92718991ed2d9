//! What the benchmarks read besides their own clocks: etcd's own counters,
//! from its `/metrics` (Prometheus text), and this process's CPU time.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `endpoint`'s whole `/metrics` page, or `None` if it does not answer.
pub async fn scrape(endpoint: &str) -> Option<String> {
    Some(scrape_at(endpoint).await?.0)
}

/// `endpoint`'s whole `/metrics` page, and when etcd read its counters:
/// taken as halfway between the request sent and the page's first byte
/// (etcd gathers the counters before it writes the page; the time the
/// rest of the page takes, which grows with etcd's load, is left out).
pub async fn scrape_at(endpoint: &str) -> Option<(String, std::time::Instant)> {
    let addr = endpoint.strip_prefix("http://")?;
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let asked = std::time::Instant::now();
    let mut page = vec![0; 64 * 1024];
    let first = stream.read(&mut page).await.ok()?;
    let at = asked + asked.elapsed() / 2;
    page.truncate(first);
    stream.read_to_end(&mut page).await.ok()?;
    Some((String::from_utf8(page).ok()?, at))
}

/// The value of the sample `name` (with its labels, exactly as etcd
/// prints them) in a scraped page.
pub fn value(page: &str, name: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The value of counter `name` on `endpoint`'s `/metrics`.
pub async fn counter(endpoint: &str, name: &str) -> Option<f64> {
    value(&scrape(endpoint).await?, name)
}

/// This process's CPU time so far (user + system, `getrusage`), µs.
pub fn cpu_us() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let t = |tv: nix::sys::time::TimeVal| tv.tv_sec() as f64 * 1e6 + tv.tv_usec() as f64;
        t(u.user_time()) + t(u.system_time())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_found_by_its_name_and_labels() {
        let page = "# HELP x\nx_total{m=\"a\"} 3\nx_total{m=\"ab\"} 5\nx_total 7\n";
        assert_eq!(value(page, "x_total{m=\"a\"}"), Some(3.0));
        assert_eq!(value(page, "x_total{m=\"ab\"}"), Some(5.0));
        assert_eq!(value(page, "x_total"), Some(7.0));
        assert_eq!(value(page, "y_total"), None);
    }
}
