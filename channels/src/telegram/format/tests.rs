use super::*;

#[test]
fn smoke() {
    println!("{}", render_html("# Hi\n\nSome **bold** and *it*.\n\n- a\n- b\n  - c\n\n```rust\nfn x() { a < b && c }\n```"));
}
