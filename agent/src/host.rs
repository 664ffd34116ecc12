//! Host sampler: CPU, memory, network and disk throughput of this machine from `/proc`, every
//! `host.interval_ms`, stored like partition samples (the "machine hotspot" signal).
//!
//! Rates come from the difference of two readings of cumulative counters; the first tick only
//! takes a baseline. Parsing is separated from reading so tests feed it fixed `/proc` text.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_common::protocol::HostStats;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::config::AgentConfig;
use crate::store::MetricStore;

/// Cumulative counters read at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Jiffies: (busy, total) over all CPUs.
    pub cpu_busy: u64,
    pub cpu_total: u64,
    pub cpu_cores: u32,
    pub memory_total_bytes: u64,
    pub memory_available_bytes: u64,
    pub net_rx_bytes: u64,
    pub net_tx_bytes: u64,
    pub disk_read_bytes: u64,
    pub disk_write_bytes: u64,
}

/// Where to read from; `/proc` and `/sys/block` in production, a fixture in tests.
#[derive(Debug, Clone)]
pub struct ProcRoot {
    pub proc: PathBuf,
    pub sys_block: PathBuf,
}

impl Default for ProcRoot {
    fn default() -> Self {
        Self { proc: PathBuf::from("/proc"), sys_block: PathBuf::from("/sys/block") }
    }
}

impl ProcRoot {
    pub fn read(&self) -> std::io::Result<Counters> {
        let stat = std::fs::read_to_string(self.proc.join("stat"))?;
        let meminfo = std::fs::read_to_string(self.proc.join("meminfo"))?;
        let net = std::fs::read_to_string(self.proc.join("net/dev"))?;
        let disks = std::fs::read_to_string(self.proc.join("diskstats"))?;
        let whole_disks = list_dir(&self.sys_block);
        let mut c = Counters::default();
        parse_stat(&stat, &mut c);
        parse_meminfo(&meminfo, &mut c);
        parse_net_dev(&net, &mut c);
        parse_diskstats(&disks, &whole_disks, &mut c);
        Ok(c)
    }
}

fn list_dir(dir: &Path) -> HashSet<String> {
    std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default()
}

pub fn parse_stat(text: &str, c: &mut Counters) {
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("cpu") => {
                let v: Vec<u64> = fields.filter_map(|f| f.parse().ok()).collect();
                // user nice system idle iowait irq softirq steal (guest is inside user).
                let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
                let total: u64 = v.iter().take(8).sum();
                c.cpu_total = total;
                c.cpu_busy = total.saturating_sub(idle);
            }
            Some(name) if name.starts_with("cpu") => c.cpu_cores += 1,
            _ => {}
        }
    }
}

pub fn parse_meminfo(text: &str, c: &mut Counters) {
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next().and_then(|v| v.parse::<u64>().ok())) else {
            continue;
        };
        match key {
            "MemTotal:" => c.memory_total_bytes = value * 1024,
            "MemAvailable:" => c.memory_available_bytes = value * 1024,
            _ => {}
        }
    }
}

pub fn parse_net_dev(text: &str, c: &mut Counters) {
    for line in text.lines().skip(2) {
        let Some((iface, rest)) = line.split_once(':') else { continue };
        if iface.trim() == "lo" {
            continue;
        }
        let v: Vec<u64> = rest.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        c.net_rx_bytes += v.first().copied().unwrap_or(0);
        c.net_tx_bytes += v.get(8).copied().unwrap_or(0);
    }
}

/// Only whole disks (names in `/sys/block`, minus loop and ram devices), so partitions are not
/// counted twice.
pub fn parse_diskstats(text: &str, whole_disks: &HashSet<String>, c: &mut Counters) {
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let Some(&name) = f.get(2) else { continue };
        if !whole_disks.contains(name) || name.starts_with("loop") || name.starts_with("ram") {
            continue;
        }
        let sectors = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        c.disk_read_bytes += sectors(5) * 512;
        c.disk_write_bytes += sectors(9) * 512;
    }
}

/// Rates between two readings `elapsed` apart.
pub fn rates(prev: &Counters, now: &Counters, elapsed: Duration) -> HostStats {
    let secs = elapsed.as_secs_f64().max(1e-3);
    let per_sec = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
    let cpu_total = now.cpu_total.saturating_sub(prev.cpu_total);
    let cpu_busy = now.cpu_busy.saturating_sub(prev.cpu_busy);
    HostStats {
        cpu_ratio: if cpu_total == 0 { 0.0 } else { (cpu_busy as f64 / cpu_total as f64).clamp(0.0, 1.0) },
        cpu_cores: now.cpu_cores.max(1),
        memory_used_bytes: now.memory_total_bytes.saturating_sub(now.memory_available_bytes),
        memory_total_bytes: now.memory_total_bytes,
        net_rx_bytes_per_sec: per_sec(prev.net_rx_bytes, now.net_rx_bytes),
        net_tx_bytes_per_sec: per_sec(prev.net_tx_bytes, now.net_tx_bytes),
        disk_read_bytes_per_sec: per_sec(prev.disk_read_bytes, now.disk_read_bytes),
        disk_write_bytes_per_sec: per_sec(prev.disk_write_bytes, now.disk_write_bytes),
    }
}

/// Samples the host every `host.interval_ms` (read live each tick) until cancelled.
pub async fn run(
    root: ProcRoot,
    store: Arc<MetricStore>,
    config: watch::Receiver<Arc<AgentConfig>>,
    cancel: CancellationToken,
) {
    let mut prev: Option<(Counters, Instant)> = None;
    loop {
        let host = config.borrow().host.clone();
        let sleep = tokio::time::sleep(Duration::from_millis(host.interval_ms));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = sleep => {}
        }
        if !host.enabled {
            prev = None;
            continue;
        }
        let reading = {
            let root = root.clone();
            tokio::task::spawn_blocking(move || root.read()).await
        };
        let now = match reading {
            Ok(Ok(c)) => (c, Instant::now()),
            Ok(Err(error)) => {
                warn!(%error, "cannot read host stats from /proc");
                continue;
            }
            Err(error) => {
                warn!(%error, "host sampler task failed");
                continue;
            }
        };
        if let Some((prev_counters, prev_at)) = &prev {
            let stats = rates(prev_counters, &now.0, now.1.duration_since(*prev_at));
            let interval_ms = now.1.duration_since(*prev_at).as_millis() as u64;
            let timestamp_ms = chrono::Utc::now().timestamp_millis();
            if let Err(error) = store.write_host(timestamp_ms, interval_ms.max(1), stats).await {
                warn!(%error, "cannot store host sample");
            }
        }
        prev = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str =
        "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\ncpu1 50 0 25 400 25 0 0 0 0 0\nintr 1\n";
    const MEMINFO: &str = "MemTotal:       16000 kB\nMemFree:         1000 kB\nMemAvailable:    4000 kB\n";
    const NET: &str = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes\n    lo: 999 1 0 0 0 0 0 0 999 1 0 0 0 0 0 0\n  eth0: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n";
    const DISKS: &str = "   8       0 sda 10 0 100 0 20 0 200 0 0 0 0\n   8       1 sda1 10 0 100 0 20 0 200 0 0 0 0\n   7       0 loop0 1 0 5000 0 0 0 0 0 0 0 0\n";

    fn read(stat: &str) -> Counters {
        let mut c = Counters::default();
        parse_stat(stat, &mut c);
        parse_meminfo(MEMINFO, &mut c);
        parse_net_dev(NET, &mut c);
        let disks: HashSet<String> = ["sda", "loop0"].into_iter().map(String::from).collect();
        parse_diskstats(DISKS, &disks, &mut c);
        c
    }

    #[test]
    fn parses_proc_text() {
        let c = read(STAT);
        assert_eq!((c.cpu_busy, c.cpu_total, c.cpu_cores), (150, 1000, 2));
        assert_eq!((c.memory_total_bytes, c.memory_available_bytes), (16_000 * 1024, 4000 * 1024));
        assert_eq!((c.net_rx_bytes, c.net_tx_bytes), (1000, 2000), "loopback excluded");
        assert_eq!((c.disk_read_bytes, c.disk_write_bytes), (100 * 512, 200 * 512), "partitions and loop excluded");
    }

    #[test]
    fn rates_between_readings() {
        let prev = read(STAT);
        let mut now = read("cpu  200 0 100 850 50 0 0 0 0 0\ncpu0 1\ncpu1 1\n");
        now.net_rx_bytes += 4000;
        let h = rates(&prev, &now, Duration::from_secs(2));
        assert!((h.cpu_ratio - 150.0 / 200.0).abs() < 1e-9, "{}", h.cpu_ratio);
        assert_eq!(h.net_rx_bytes_per_sec, 2000.0);
        assert_eq!(h.memory_used_bytes, 12_000 * 1024);
    }

    #[test]
    fn reads_the_real_proc() {
        let c = ProcRoot::default().read().expect("/proc is readable on linux");
        assert!(c.cpu_total > 0 && c.cpu_cores > 0 && c.memory_total_bytes > 0, "{c:?}");
    }
}
