//! The windows models' servers named, as both stores keep them across restarts: only ever
//! lowered under one configured window (two processes learning at once keep the smaller),
//! replaced under another, forgotten on request.

use switchboard::store::windows::LearnedWindow;

use crate::stores::on_both_stores;

fn learned(model: &str, window: u64, configured: u64) -> LearnedWindow {
    LearnedWindow { model: model.to_owned(), window, configured }
}

on_both_stores! {
    async fn a_learned_window_only_shrinks_until_its_configured_window_changes(fresh) {
        let store = &fresh.store;
        assert!(store.learned_windows().await.unwrap().is_empty());
        store.save_learned_window(&learned("local/qwen", 4096, 8192)).await.unwrap();
        // Another process (as after a restart, or a second worker) sees it, and cannot grow it.
        let other = fresh.another().await;
        assert_eq!(other.learned_windows().await.unwrap(), [learned("local/qwen", 4096, 8192)]);
        other.save_learned_window(&learned("local/qwen", 6000, 8192)).await.unwrap();
        assert_eq!(store.learned_windows().await.unwrap(), [learned("local/qwen", 4096, 8192)]);
        other.save_learned_window(&learned("local/qwen", 2048, 8192)).await.unwrap();
        assert_eq!(store.learned_windows().await.unwrap(), [learned("local/qwen", 2048, 8192)]);
        // The configured window changed: what is learned under the new one counts, larger or not.
        store.save_learned_window(&learned("local/qwen", 12_000, 16_384)).await.unwrap();
        store.save_learned_window(&learned("openai/gpt-4o", 64_000, 128_000)).await.unwrap();
        let both = [learned("local/qwen", 12_000, 16_384), learned("openai/gpt-4o", 64_000, 128_000)];
        assert_eq!(other.learned_windows().await.unwrap(), both);
        other.forget_learned_window("local/qwen").await.unwrap();
        assert_eq!(store.learned_windows().await.unwrap(), [learned("openai/gpt-4o", 64_000, 128_000)]);
    }
}
