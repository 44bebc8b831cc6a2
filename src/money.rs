//! Money as shown to people. A leaf every layer may use: the machine's budget notes,
//! the renderers and the console all print the same amounts the same way.

/// USD as shown to people: `$0.0123`, `$12.50`.
pub fn usd(v: f64) -> String {
    if v != 0.0 && v.abs() < 1.0 {
        format!("${v:.4}")
    } else {
        format!("${v:.2}")
    }
}
