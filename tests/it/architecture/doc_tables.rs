//! `docs/architecture.md`'s module map against the layer tables of this test: each of its two
//! tables lists the modules of one tree, one row each, in the order of their layer's list, the
//! layer number on the first row of a layer. The third column (what a module is) is free prose.
//! On a difference the test prints the table as it should be, with the prose already written.

use std::collections::BTreeMap;
use std::path::Path;

/// One tree's table: the header names the tree (`src/` or `channels/src/`) in its second cell.
pub(super) struct DocTable {
    pub tree: &'static str,
    pub header: &'static str,
}

pub(super) const SRC_TABLE: DocTable =
    DocTable { tree: "`src/`", header: "| layer | `src/` (crate `switchboard`) | what |" };
pub(super) const CHANNELS_TABLE: DocTable =
    DocTable { tree: "`channels/src/`", header: "| layer | `channels/src/` (crate `switchboard-channels`) | what |" };

/// What the document's table says: the modules of each layer, and what each module is.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Parsed {
    pub layers: Vec<Vec<String>>,
    pub prose: BTreeMap<String, String>,
}

/// Fails, printing the table as it should be, unless `doc`'s table for `table.tree` lists
/// exactly `layers`.
pub(super) fn assert_doc_table(doc: &str, table: &DocTable, layers: &[&[&str]]) {
    let parsed = parse_table(doc, table.tree);
    let wanted: Vec<Vec<String>> = layers.iter().map(|layer| layer.iter().map(|m| (*m).to_owned()).collect()).collect();
    let found = parsed.as_ref().map(|parsed| &parsed.layers);
    if found.ok() != Some(&wanted) {
        let prose = parsed.as_ref().map(|parsed| parsed.prose.clone()).unwrap_or_default();
        let problem = match &parsed {
            Ok(parsed) => format!("it lists {:?}", parsed.layers),
            Err(err) => err.clone(),
        };
        panic!(
            "docs/architecture.md's module map for {} differs from tests/it/architecture.rs ({problem}); it should \
             read:\n\n{}",
            table.tree,
            expected_table(table, layers, &prose)
        );
    }
}

pub(super) fn read_doc() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("cannot read {}: {err}", path.display()))
}

/// The rows of the table whose header names `tree`; `Err` says what is wrong with it.
pub(super) fn parse_table(doc: &str, tree: &str) -> Result<Parsed, String> {
    let mut lines = doc.lines().skip_while(|line| !is_header(line, tree));
    lines.next().ok_or_else(|| format!("no table with a header `| layer | {tree} … |`"))?;
    let mut parsed = Parsed::default();
    // The separator row, then one row per module up to the first line that is not a row.
    for row in lines.skip(1).take_while(|line| line.starts_with('|')) {
        let cells: Vec<&str> = row.trim_matches('|').splitn(3, '|').map(str::trim).collect();
        let [layer, module, prose] = cells[..] else { return Err(format!("the row `{row}` has not three cells")) };
        let module = module
            .strip_prefix('`')
            .and_then(|m| m.strip_suffix('`'))
            .ok_or_else(|| format!("the row `{row}` names no module as `name`"))?;
        if !layer.is_empty() {
            if layer != parsed.layers.len().to_string() {
                return Err(format!("the row `{row}` starts layer {layer}, not {}", parsed.layers.len()));
            }
            parsed.layers.push(Vec::new());
        }
        let Some(current) = parsed.layers.last_mut() else { return Err(format!("the row `{row}` has no layer")) };
        current.push(module.to_owned());
        parsed.prose.insert(module.to_owned(), prose.to_owned());
    }
    Ok(parsed)
}

fn is_header(line: &str, tree: &str) -> bool {
    line.starts_with("| layer |") && line.split('|').nth(2).is_some_and(|cell| cell.trim().starts_with(tree))
}

/// The table as it should be: the layers' modules in order, each with the prose the document
/// has for it (or `…` for a module it lacks).
pub(super) fn expected_table(table: &DocTable, layers: &[&[&str]], prose: &BTreeMap<String, String>) -> String {
    let mut out = format!("{}\n| --- | --- | --- |\n", table.header);
    for (number, layer) in layers.iter().enumerate() {
        for (at, module) in layer.iter().enumerate() {
            let layer_cell = if at == 0 { format!(" {number} ") } else { " ".to_owned() };
            let what = prose.get(*module).map_or("…", String::as_str);
            out.push_str(&format!("|{layer_cell}| `{module}` | {what} |\n"));
        }
    }
    out
}

mod tests {
    use super::*;

    const DOC: &str = "intro\n\n\
        | layer | `src/` (crate `x`) | what |\n\
        | --- | --- | --- |\n\
        | 0 | `clock` | the time |\n\
        | | `config` | the config: a | in prose |\n\
        | 1 | `worker` | turns |\n\
        \n\
        | layer | `channels/src/` (crate `y`) | what |\n\
        | --- | --- | --- |\n\
        | 0 | `contract` | JSON |\n";

    #[test]
    fn rows_are_read_per_layer_with_their_prose() {
        let parsed = parse_table(DOC, "`src/`").unwrap();
        assert_eq!(parsed.layers, [vec!["clock", "config"], vec!["worker"]]);
        assert_eq!(parsed.prose["config"], "the config: a | in prose");
        assert_eq!(parse_table(DOC, "`channels/src/`").unwrap().layers, [vec!["contract"]]);
    }

    #[test]
    fn a_skipped_layer_number_or_a_missing_table_is_an_error() {
        let skipped = DOC.replace("| 1 | `worker`", "| 2 | `worker`");
        assert!(parse_table(&skipped, "`src/`").unwrap_err().contains("starts layer 2, not 1"));
        assert!(parse_table("no table here", "`src/`").unwrap_err().contains("no table"));
    }

    #[test]
    fn the_expected_table_keeps_the_prose_and_marks_new_modules() {
        let parsed = parse_table(DOC, "`src/`").unwrap();
        let table = DocTable { tree: "`src/`", header: "| layer | `src/` | what |" };
        let text = expected_table(&table, &[&["clock"], &["config", "store"]], &parsed.prose);
        let want = "| layer | `src/` | what |\n| --- | --- | --- |\n| 0 | `clock` | the time |\n\
                    | 1 | `config` | the config: a | in prose |\n| | `store` | … |\n";
        assert_eq!(text, want);
    }

    #[test]
    #[should_panic(expected = "| 0 | `clock` | the time |")]
    fn a_difference_fails_with_the_table_to_write() {
        assert_doc_table(DOC, &DocTable { tree: "`src/`", header: "| layer | `src/` | what |" }, &[&["clock"]]);
    }
}
