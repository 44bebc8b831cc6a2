//! What model calls cost (issue 15): a price table shipped with agentrun, by model
//! name prefix, overridable per run (`price = { input = …, output = …, cached_input =
//! … }` in the front matter). Prices are USD per million tokens; input tokens served
//! from the provider's prompt cache are priced as cached input.
//!
//! The table is a snapshot of the providers' public list prices (standard tier) and
//! will age: a run that must be exact sets `price` itself.

use super::Usage;
use serde::{Deserialize, Serialize};

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    /// Input tokens read from the prompt cache; `None`: priced as input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<f64>,
    /// Input tokens written to the prompt cache (Anthropic: 1.25× input for the
    /// 5-minute cache); `None`: priced as input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write: Option<f64>,
}

impl Price {
    /// The cost in USD of one call's usage (`usage.input` includes the cached part and
    /// the part written to the cache, each at its own price).
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached.min(usage.input);
        let written = usage.cache_write.min(usage.input - cached);
        let fresh = usage.input - cached - written;
        let cached_price = self.cached_input.unwrap_or(self.input);
        let write_price = self.cache_write.unwrap_or(self.input);
        (fresh as f64 * self.input
            + cached as f64 * cached_price
            + written as f64 * write_price
            + usage.output as f64 * self.output)
            / 1_000_000.0
    }

    pub fn validate(&self) -> Result<(), String> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if ok(self.input)
            && ok(self.output)
            && self.cached_input.is_none_or(ok)
            && self.cache_write.is_none_or(ok)
        {
            Ok(())
        } else {
            Err("`price` values must be numbers of USD per million tokens, 0 or more".into())
        }
    }
}

/// OpenAI: cache reads at their price, no write premium.
const fn p(input: f64, cached_input: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cached_input: Some(cached_input),
        cache_write: None,
    }
}

/// Anthropic: reads at 0.1× input, 5-minute cache writes at 1.25× input.
const fn a(input: f64, output: f64) -> Price {
    Price {
        input,
        output,
        cached_input: Some(input / 10.0),
        cache_write: Some(input * 1.25),
    }
}

/// List prices by model name prefix; the longest matching prefix wins.
const PRICES: &[(&str, Price)] = &[
    ("gpt-4o-mini", p(0.15, 0.075, 0.60)),
    ("gpt-4o", p(2.50, 1.25, 10.00)),
    ("gpt-4.1-nano", p(0.10, 0.025, 0.40)),
    ("gpt-4.1-mini", p(0.40, 0.10, 1.60)),
    ("gpt-4.1", p(2.00, 0.50, 8.00)),
    ("gpt-5-nano", p(0.05, 0.005, 0.40)),
    ("gpt-5-mini", p(0.25, 0.025, 2.00)),
    ("gpt-5", p(1.25, 0.125, 10.00)),
    ("o4-mini", p(1.10, 0.275, 4.40)),
    ("o3-mini", p(1.10, 0.55, 4.40)),
    ("o3", p(2.00, 0.50, 8.00)),
    ("claude-opus-4-1", a(15.00, 75.00)),
    ("claude-opus-4", a(15.00, 75.00)),
    ("claude-sonnet-4", a(3.00, 15.00)),
    ("claude-3-7-sonnet", a(3.00, 15.00)),
    ("claude-3-5-haiku", a(0.80, 4.00)),
    ("claude-haiku-4-5", a(1.00, 5.00)),
];

/// The shipped list price for a model name (a spec's model part, any `org/` prefix
/// dropped).
pub fn list_price(model: &str) -> Option<Price> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    PRICES
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, p)| *p)
}

/// How a run prices its model calls: the run's own `price` for every model, else the
/// list price of the model that answered.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pricing {
    pub given: Option<Price>,
}

impl Pricing {
    /// The price for a model spec (`openai:gpt-4o-mini`); `None`: unknown.
    pub fn price(&self, spec: &str) -> Option<Price> {
        self.given.or_else(|| {
            let (scheme, model) = spec.split_once(':')?;
            (scheme != "script").then(|| list_price(model)).flatten()
        })
    }

    /// The cost of one call, 0 when the model's price is unknown.
    pub fn cost(&self, spec: &str, usage: &Usage) -> f64 {
        self.price(spec).map_or(0.0, |p| p.cost(usage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cached_input_is_priced_as_such_and_the_longest_prefix_wins() {
        let usage = Usage {
            input: 1_000_000,
            output: 100_000,
            cached: 400_000,
            cache_write: 0,
            ..Default::default()
        };
        let mini = list_price("gpt-4o-mini-2024-07-18").unwrap();
        // 600k fresh × 0.15 + 400k cached × 0.075 + 100k out × 0.60, per million.
        let want = 0.09 + 0.03 + 0.06;
        assert!(
            (mini.cost(&usage) - want).abs() < 1e-12,
            "{}",
            mini.cost(&usage)
        );
        assert_eq!(list_price("gpt-4o").unwrap().input, 2.5);
        assert_eq!(list_price("my-local-model"), None);
    }

    #[test]
    fn a_given_price_covers_every_model_and_scripts_are_free_otherwise() {
        let none = Pricing::default();
        assert_eq!(none.price("script:s.json"), None);
        assert_eq!(none.price("openai:gpt-4o").map(|p| p.output), Some(10.0));
        let given = Pricing {
            given: Some(Price {
                input: 1.0,
                output: 2.0,
                cached_input: None,
                cache_write: None,
            }),
        };
        let usage = Usage {
            input: 500_000,
            output: 250_000,
            cached: 100_000,
            cache_write: 0,
            ..Default::default()
        };
        assert_eq!(given.cost("script:s.json", &usage), 1.0);
    }
}
