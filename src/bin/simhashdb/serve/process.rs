//! The process's own metrics, under the names Prometheus client libraries
//! give them (`process_*`), read from `/proc/self` on Linux. Elsewhere, or
//! when a file cannot be read, the metric is left out rather than made up.

use std::fmt::Write;

/// Clock ticks per second of `/proc/<pid>/stat`'s times (`USER_HZ`, which
/// the kernel fixes at 100 for this interface on every architecture).
const USER_HZ: f64 = 100.0;

/// What `/proc/self` tells of the process.
#[derive(Debug, Default, PartialEq)]
pub struct Process {
    pub cpu_seconds: Option<f64>,
    pub start_time_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
}

impl Process {
    /// Reads this process's figures.
    pub fn read() -> Process {
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let fields = stat.as_deref().and_then(stat_fields);
        let boot = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|s| boot_time(&s));
        let status = std::fs::read_to_string("/proc/self/status").ok();
        let kib = |key: &str| status.as_deref().and_then(|s| status_kib(s, key));
        Process {
            cpu_seconds: fields.map(|f| (f.utime + f.stime) as f64 / USER_HZ),
            start_time_seconds: fields
                .zip(boot)
                .map(|(f, boot)| boot as f64 + f.start_ticks as f64 / USER_HZ),
            resident_bytes: kib("VmRSS:").map(|k| k * 1024),
            virtual_bytes: kib("VmSize:").map(|k| k * 1024),
            open_fds: std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|d| d.count() as u64),
            max_fds: super::open_file_limit(),
        }
    }

    /// Appends the figures in the text exposition format.
    pub fn render(&self, out: &mut String) {
        let float = [
            (
                "process_cpu_seconds_total",
                "counter",
                "User and system CPU time of the process, in seconds.",
                self.cpu_seconds,
            ),
            (
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since the Unix epoch, in seconds.",
                self.start_time_seconds,
            ),
        ];
        for (name, kind, help, value) in float {
            if let Some(value) = value {
                super::metrics::header(out, name, kind, help);
                let _ = writeln!(out, "{name} {value}");
            }
        }
        let int = [
            (
                "process_resident_memory_bytes",
                "Resident memory of the process (including the index's mapped files it touched), in bytes.",
                self.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory of the process (including every mapped segment file), in bytes.",
                self.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Open file descriptors (connections, index files, the runtime's own).",
                self.open_fds,
            ),
            (
                "process_max_fds",
                "The process's limit on open file descriptors (the soft RLIMIT_NOFILE).",
                self.max_fds,
            ),
        ];
        for (name, help, value) in int {
            if let Some(value) = value {
                super::metrics::header(out, name, "gauge", help);
                let _ = writeln!(out, "{name} {value}");
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct StatFields {
    utime: u64,
    stime: u64,
    start_ticks: u64,
}

/// Fields 14, 15 and 22 of `/proc/self/stat` (proc(5)). The command name
/// (field 2) is in parentheses and may hold spaces and parentheses itself:
/// the fields are counted from the last `)`.
fn stat_fields(stat: &str) -> Option<StatFields> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(StatFields {
        utime: field(14)?,
        stime: field(15)?,
        start_ticks: field(22)?,
    })
}

/// `btime` of `/proc/stat`: the boot time, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// A `Key:   N kB` line of `/proc/self/status`.
fn status_kib(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        // A command name with spaces and a parenthesis, as proc(5) allows.
        let stat = "4242 (a) b (c) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 9 0 123456 104857600 2560 18446744073709551615";
        let f = stat_fields(stat).expect("fields");
        assert_eq!((f.utime, f.stime, f.start_ticks), (250, 75, 123456));
        assert!(stat_fields("4242 (no closing parenthesis S 1").is_none());
        assert!(stat_fields("4242 (short) S 1 2").is_none());
    }

    #[test]
    fn boot_time_and_status_lines_are_parsed() {
        assert_eq!(
            boot_time("cpu  1 2 3\nbtime 1764201600\nprocesses 9\n"),
            Some(1_764_201_600)
        );
        assert_eq!(boot_time("cpu 1 2 3\n"), None);
        let status = "Name:\tsimhashdb\nVmSize:\t  123456 kB\nVmRSS:\t    2048 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(2048));
        assert_eq!(status_kib(status, "VmSize:"), Some(123_456));
        assert_eq!(status_kib(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_is_read_on_linux() {
        let p = Process::read();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs_f64();
        let start = p.start_time_seconds.expect("start time");
        assert!(
            start <= now + 1.0 && start > now - 86_400.0 * 365.0,
            "{start} vs {now}"
        );
        assert!(p.resident_bytes.expect("rss") > 0);
        assert!(p.virtual_bytes.expect("vsize") >= p.resident_bytes.expect("rss"));
        assert!(p.open_fds.expect("fds") >= 3);
        assert!(p.cpu_seconds.expect("cpu") >= 0.0);
    }
}
