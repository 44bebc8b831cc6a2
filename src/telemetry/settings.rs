//! Whether telemetry is on, and how it exports: the standard `OTEL_*` variables
//! (docs/observability.md). Nothing set means off: no thread, no socket.

use std::time::Duration;

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub service_name: String,
    /// Span batches wait at most this long before they are sent (`OTEL_BSP_SCHEDULE_DELAY`).
    pub delay: Duration,
    /// Finished spans waiting to be sent; more are dropped, and counted
    /// (`OTEL_BSP_MAX_QUEUE_SIZE`).
    pub queue: usize,
    /// How long a process that ends waits for its last spans to be sent
    /// (`OTEL_BSP_EXPORT_TIMEOUT`, at most [`MAX_FLUSH`]).
    pub flush: Duration,
    /// Message content, tool arguments and results go on spans, redacted
    /// (`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`).
    pub content: bool,
    /// Metric export interval (`OTEL_METRIC_EXPORT_INTERVAL`).
    pub metric_interval: Duration,
}

/// A process never waits longer than this at its end for a collector.
pub const MAX_FLUSH: Duration = Duration::from_secs(5);

/// Why the environment's telemetry settings cannot be used.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SettingsError {
    #[error(
        "OTEL_EXPORTER_OTLP_PROTOCOL={0}: agentrun exports OTLP over http/protobuf only; telemetry is off"
    )]
    Protocol(String),
}

impl Settings {
    /// The settings `var` gives (`std::env::var` in the binary), or `None` when
    /// telemetry is off: no endpoint, or `OTEL_SDK_DISABLED=true`.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Settings>, SettingsError> {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        if set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            && set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        {
            return Ok(None);
        }
        for name in [
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        ] {
            if let Some(p) = set(name)
                && p.trim() != "http/protobuf"
            {
                return Err(SettingsError::Protocol(p));
            }
        }
        let ms = |name: &str, default: u64| {
            Duration::from_millis(
                set(name)
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(default),
            )
        };
        Ok(Some(Settings {
            service_name: set("OTEL_SERVICE_NAME").unwrap_or_else(|| "agentrun".into()),
            delay: ms("OTEL_BSP_SCHEDULE_DELAY", 5000),
            queue: set("OTEL_BSP_MAX_QUEUE_SIZE")
                .and_then(|v| v.trim().parse().ok())
                .filter(|n| *n > 0)
                .unwrap_or(2048),
            flush: ms("OTEL_BSP_EXPORT_TIMEOUT", 2000).min(MAX_FLUSH),
            content: set("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
            metric_interval: ms("OTEL_METRIC_EXPORT_INTERVAL", 60_000),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn off_unless_an_endpoint_is_set_and_not_disabled() {
        assert_eq!(Settings::from_env(env(&[])), Ok(None));
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")];
        let s = Settings::from_env(env(&on)).unwrap().unwrap();
        assert_eq!(s.service_name, "agentrun");
        assert!(!s.content);
        let off = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
            ("OTEL_SDK_DISABLED", "TRUE"),
        ];
        assert_eq!(Settings::from_env(env(&off)), Ok(None));
    }

    #[test]
    fn grpc_is_refused_by_name_and_the_flush_is_bounded() {
        let grpc = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        assert_eq!(
            Settings::from_env(env(&grpc)),
            Err(SettingsError::Protocol("grpc".into()))
        );
        let long = [
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://127.0.0.1:4318/v1/traces",
            ),
            ("OTEL_BSP_EXPORT_TIMEOUT", "600000"),
            ("OTEL_SERVICE_NAME", "billing-agents"),
        ];
        let s = Settings::from_env(env(&long)).unwrap().unwrap();
        assert_eq!(s.flush, MAX_FLUSH);
        assert_eq!(s.service_name, "billing-agents");
    }
}
