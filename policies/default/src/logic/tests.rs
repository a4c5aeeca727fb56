use super::*;

#[test]
fn rfc3339_matches_known_instants() {
    let mut s = String::new();
    push_rfc3339(&mut s, 0);
    assert_eq!(s, "1970-01-01T00:00:00Z");
    s.clear();
    // 2024-02-29T12:34:56Z, a leap day.
    push_rfc3339(&mut s, 1_709_210_096_000);
    assert_eq!(s, "2024-02-29T12:34:56Z");
    s.clear();
    push_rfc3339(&mut s, 1_796_169_600_999);
    assert_eq!(s, "2026-12-02T00:00:00Z");
}
