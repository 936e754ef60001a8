//! How sizes and I/O errors are said in diagnostics: in a person's words rather than Rust's.

/// `bytes` for people: `64 MiB`, `95.4 MiB`, `512 KiB`, `100 bytes`.
pub(super) fn size(bytes: u64) -> String {
    let (value, unit) = match bytes {
        b if b >= 1 << 30 => (b as f64 / (1u64 << 30) as f64, "GiB"),
        b if b >= 1 << 20 => (b as f64 / (1u64 << 20) as f64, "MiB"),
        b if b >= 1 << 10 => (b as f64 / 1024.0, "KiB"),
        b => return format!("{b} bytes"),
    };
    let text = format!("{value:.1}");
    format!("{} {unit}", text.strip_suffix(".0").unwrap_or(&text))
}

/// Why a file could not be read, in a person's words.
pub(super) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size(100), "100 bytes");
        assert_eq!(size(16384), "16 KiB");
        assert_eq!(size(1 << 20), "1 MiB");
        assert_eq!(size(100_000_000), "95.4 MiB");
        assert_eq!(size(3 << 30), "3 GiB");
    }
}
