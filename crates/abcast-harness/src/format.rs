//! How the harness shows numbers and times to people: counts grouped by thousands, latencies
//! in milliseconds, byte counts in binary units, durations parsed from flags, and the UTC
//! timestamp that names a result directory. Shared by the demo, the benchmarks and the plots.

/// Parses a duration in seconds: positive, finite, at most a day.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s} must be a positive number of seconds"));
    }
    if v > 86_400.0 {
        return Err(format!("{s} s is more than a day"));
    }
    Ok(v)
}

/// 1234567 -> "1 234 567": long counts are read at a glance.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A latency in microseconds, shown in milliseconds with sensible precision.
pub fn ms(us: f64) -> String {
    let v = us / 1000.0;
    if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 100.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.0} ms")
    }
}

/// A byte count with a binary unit: 32768 -> "32 KiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds since the epoch as UTC civil time: (for a directory name, for people).
pub fn utc_now() -> (String, String) {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    (
        format!("{year:04}{month:02}{day:02}-{h:02}{m:02}{s:02}"),
        format!("{year:04}-{month:02}-{day:02} {h:02}:{m:02}:{s:02} UTC"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_shown_with_units_people_read() {
        assert_eq!(group(1_234_567), "1 234 567");
        assert_eq!(group(12), "12");
        assert_eq!(bytes(32 << 10), "32 KiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(ms(150.0), "0.15 ms");
        assert_eq!(ms(25_000.0), "25.0 ms");
    }
}
