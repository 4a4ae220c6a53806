//! The Markdown → Telegram HTML renderer, as the Telegram adapter runs it on every reply
//! (`render_parts` with Telegram's 4,096-unit limit), and `render_html` alone.
//!
//! `cargo bench -p switchboard-channels --features telegram --bench telegram_format`

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a benchmark fails loudly on a broken fixture")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use switchboard_channels::telegram::format::{MESSAGE_LIMIT, render_html, render_parts};

mod support;

fn telegram_format(c: &mut Criterion) {
    let (typical, long) = (support::typical_answer(), support::long_answer());
    for (name, text) in [("typical", &typical), ("long", &long)] {
        let parts = render_parts(text, MESSAGE_LIMIT);
        let html: usize = parts.iter().map(|part| part.html.len()).sum();
        println!("{name}: {} chars of Markdown, {} part(s), {html} bytes of HTML", text.chars().count(), parts.len());
    }
    let mut group = c.benchmark_group("telegram_format");
    group.bench_function("render_parts/typical", |b| b.iter(|| render_parts(black_box(&typical), MESSAGE_LIMIT)));
    group.bench_function("render_parts/long", |b| b.iter(|| render_parts(black_box(&long), MESSAGE_LIMIT)));
    group.bench_function("render_html/typical", |b| b.iter(|| render_html(black_box(&typical))));
    group.bench_function("render_html/long", |b| b.iter(|| render_html(black_box(&long))));
    group.finish();
}

criterion_group!(benches, telegram_format);
criterion_main!(benches);
