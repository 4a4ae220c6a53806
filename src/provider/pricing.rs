//! Estimated cost of model calls from the configured `[prices."<model>"]` table.
//!
//! A model without a price has an *unknown* cost, never zero: an operator adding up costs
//! must see that something is missing rather than a total that looks complete.

use std::collections::BTreeMap;

use switchboard_channels::contract::Usage;

use crate::config::ModelPrice;

/// Prices in USD per million tokens, by model name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PriceTable(BTreeMap<String, ModelPrice>);

impl PriceTable {
    pub fn new(prices: BTreeMap<String, ModelPrice>) -> Self {
        Self(prices)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The price of a model as a response names it (`openai/gpt-4o-mini-2024-07-18`). Tried in
    /// order: the whole name, the name without its `<provider>/` prefix, then both without a
    /// trailing date (`-2024-07-18`, `-20250929`), since providers answer with dated versions
    /// of the model asked for.
    pub fn price(&self, model: &str) -> Option<ModelPrice> {
        let bare = model.split_once('/').map(|(_, rest)| rest);
        let candidates = [Some(model), bare, Some(strip_date(model)), bare.map(strip_date)];
        candidates.into_iter().flatten().find_map(|name| self.0.get(name).copied())
    }

    /// The cost of one call, if its model has a price.
    pub fn cost(&self, model: &str, usage: Usage) -> Option<f64> {
        let price = self.price(model)?;
        // u64 → f64 loses precision only beyond 2^53 tokens.
        let tokens = |n: u64| n as f64 / 1_000_000.0;
        let cached = price.cached_input_per_mtok.unwrap_or(price.input_per_mtok);
        let written = price.cache_write_per_mtok.unwrap_or(price.input_per_mtok);
        Some(
            tokens(usage.uncached_input()) * price.input_per_mtok
                + tokens(usage.cache_read_tokens) * cached
                + tokens(usage.cache_write_tokens) * written
                + tokens(usage.output_tokens) * price.output_per_mtok,
        )
    }
}

/// The running cost of a run's calls: unknown as soon as one call's model has no price (a
/// call that used no tokens costs nothing, whatever its model). Unknown from the start when
/// no prices are configured at all.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostTally(Option<f64>);

impl CostTally {
    pub fn new(table: &PriceTable) -> Self {
        Self((!table.is_empty()).then_some(0.0))
    }

    pub fn add(&mut self, table: &PriceTable, model: &str, usage: Usage) {
        if usage == Usage::default() {
            return;
        }
        self.0 = match (self.0, table.cost(model, usage)) {
            (Some(total), Some(cost)) => Some(total + cost),
            _ => None,
        };
    }

    pub fn total(&self) -> Option<f64> {
        self.0
    }
}

/// `gpt-4o-mini-2024-07-18` → `gpt-4o-mini`; `claude-sonnet-4-5-20250929` → `claude-sonnet-4-5`.
fn strip_date(model: &str) -> &str {
    let digits = |s: &str| s.len() == 8 && s.starts_with("20") && s.bytes().all(|b| b.is_ascii_digit());
    let cut = model.len().saturating_sub(11);
    if model.is_char_boundary(cut) {
        let (head, tail) = model.split_at(cut);
        if let Some([year, month, day]) =
            tail.strip_prefix('-').map(|t| t.splitn(3, '-').collect::<Vec<_>>()).as_deref()
            && !head.is_empty()
            && digits(&format!("{year}{month}{day}"))
        {
            return head;
        }
    }
    match model.rsplit_once('-') {
        Some((head, tail)) if digits(tail) => head,
        _ => model,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> PriceTable {
        let mut prices = BTreeMap::new();
        prices.insert(
            "gpt-4o-mini".into(),
            ModelPrice { input_per_mtok: 0.15, output_per_mtok: 0.60, ..ModelPrice::default() },
        );
        let claude = ModelPrice {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cached_input_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
        };
        prices.insert("backup/claude-x".into(), claude);
        PriceTable::new(prices)
    }

    #[test]
    fn lookup_order() {
        let t = table();
        for name in ["gpt-4o-mini", "openai/gpt-4o-mini", "openai/gpt-4o-mini-2024-07-18", "gpt-4o-mini-20240718"] {
            assert_eq!(t.price(name).map(|p| p.input_per_mtok), Some(0.15), "{name}");
        }
        assert_eq!(t.price("backup/claude-x").map(|p| p.output_per_mtok), Some(15.0));
        assert_eq!(t.price("claude-x"), None, "a provider-qualified key needs the provider");
        assert_eq!(t.price("gpt-4o"), None);
        assert_eq!(strip_date("o1-2024"), "o1-2024");
    }

    #[test]
    fn cost_and_tally() {
        let t = table();
        let usage = Usage::new(1_000_000, 500_000);
        assert_eq!(t.cost("gpt-4o-mini", usage), Some(0.15 + 0.30));
        let mut tally = CostTally::new(&t);
        tally.add(&t, "openai/gpt-4o-mini", usage);
        tally.add(&t, "unknown-model", Usage::default());
        assert!((tally.total().unwrap() - 0.45).abs() < 1e-9);
        tally.add(&t, "unknown-model", usage);
        assert_eq!(tally.total(), None, "unknown price makes the total unknown");
        assert_eq!(CostTally::new(&PriceTable::default()).total(), None);
    }

    #[test]
    fn cached_input_has_its_own_prices() {
        let t = table();
        // 1M input: 600k read from the cache, 100k written into it, 300k plain.
        let usage = Usage::new(1_000_000, 0).with_cache(600_000, 100_000);
        let cost = t.cost("backup/claude-x", usage).unwrap();
        assert!((cost - (0.3 * 3.0 + 0.6 * 0.3 + 0.1 * 3.75)).abs() < 1e-9, "{cost}");
        // Without cache prices, cached input costs what input costs: never less than it may.
        let cost = t.cost("gpt-4o-mini", usage).unwrap();
        assert!((cost - 0.15).abs() < 1e-9, "{cost}");
    }
}
