//! The checker: reads a source tree as text and finds upward imports and file cycles.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

/// A source file: its path below the crate's `src/` (`config/env.rs`) and its text.
pub(super) struct SourceFile {
    path: String,
    text: String,
}

impl SourceFile {
    pub(super) fn new(path: &str, text: &str) -> Self {
        Self { path: path.to_owned(), text: text.to_owned() }
    }
}

/// What the check found wrong.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Finding {
    /// `from` names `to`, which is not in a lower layer.
    Upward { file: String, line: usize, from: String, from_layer: usize, to: String, to_layer: usize },
    /// A top-level module on disk that the layer table does not list.
    Unlisted { module: String },
    /// `crate::<name>` where `<name>` is no module of the tree.
    UnknownTarget { file: String, line: usize, name: String },
    /// Module `from` (in `file`) names `to` (in `to_file`), which, directly or not, names
    /// `from` back.
    Cycle { file: String, line: usize, from: String, to: String, to_file: String },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Upward { file, line, from, from_layer, to, to_layer } => write!(
                f,
                "{file}:{line}: `{from}` (layer {from_layer}) imports `{to}` (layer {to_layer}); \
                 only lower layers may be imported"
            ),
            Finding::Unlisted { module } => write!(f, "module `{module}` has no layer: add it to the table"),
            Finding::UnknownTarget { file, line, name } => {
                write!(f, "{file}:{line}: `crate::{name}` is no module of this crate")
            }
            Finding::Cycle { file, line, from, to, to_file } => {
                write!(f, "{file}:{line}: `{from}` imports `{to}` ({to_file}), which imports `{from}` back")
            }
        }
    }
}

// ---- reading the tree -------------------------------------------------------------------

pub(super) fn read_tree(root: &Path) -> Vec<SourceFile> {
    let mut files = Vec::new();
    collect_files(root, root, &mut files);
    files.sort_by(|a, b| a.path.cmp(&b.path));
    assert!(!files.is_empty(), "no sources under {}", root.display());
    files
}

fn collect_files(root: &Path, dir: &Path, files: &mut Vec<SourceFile>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|err| panic!("reading {}: {err}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_files(root, &path, files);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
            let relative = path.strip_prefix(root).expect("below the root");
            let relative = relative.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>();
            files.push(SourceFile { path: relative.join("/"), text });
        }
    }
}

/// Each file's module path (`config/env.rs` → `config::env`); crate roots are left out.
/// `#[path = "x_tests.rs"] mod tests;` makes `x_tests.rs` the module `…::x::tests`.
fn module_paths(files: &[SourceFile]) -> BTreeMap<String, Vec<String>> {
    let mut modules: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for file in files {
        let mut segments: Vec<String> = file.path.trim_end_matches(".rs").split('/').map(str::to_owned).collect();
        if segments.last().is_some_and(|last| last == "mod") {
            segments.pop();
        }
        if segments != ["lib"] && segments != ["main"] {
            modules.insert(file.path.clone(), segments);
        }
    }
    for file in files {
        let Some(declaring) = modules.get(&file.path).cloned() else { continue };
        let dir = file.path.rsplit_once('/').map_or(String::new(), |(dir, _)| format!("{dir}/"));
        for (target, name) in path_attributes(&file.text) {
            let mut module = declaring.clone();
            module.push(name);
            modules.insert(format!("{dir}{target}"), module);
        }
    }
    modules
}

/// `(file, module name)` of every `#[path = "file"] mod name;` in `text`.
fn path_attributes(text: &str) -> Vec<(String, String)> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let mut found = Vec::new();
    for (index, line) in lines.iter().enumerate() {
        let Some(rest) = line.strip_prefix("#[path = \"") else { continue };
        let Some((target, _)) = rest.split_once('"') else { continue };
        let declaration = lines[index + 1..].iter().find(|next| !next.starts_with("#["));
        let name = declaration.and_then(|decl| decl.split_once("mod ")).map(|(_, name)| name.trim_end_matches(';'));
        if let Some(name) = name {
            found.push((target.to_owned(), name.trim().to_owned()));
        }
    }
    found
}

// ---- the layer check --------------------------------------------------------------------

pub(super) fn layer_findings(files: &[SourceFile], layers: &[&[&str]]) -> Vec<Finding> {
    let layer_of: BTreeMap<&str, usize> =
        layers.iter().enumerate().flat_map(|(layer, names)| names.iter().map(move |name| (*name, layer))).collect();
    let modules = module_paths(files);
    let on_disk: BTreeSet<&str> = modules.values().map(|module| module[0].as_str()).collect();
    let reexported = root_reexports(files);
    let mut findings: Vec<Finding> = on_disk
        .iter()
        .filter(|module| !layer_of.contains_key(*module))
        .map(|module| Finding::Unlisted { module: (*module).to_owned() })
        .collect();
    for file in files {
        let Some(here) = modules.get(&file.path) else { continue };
        for reference in references(here, &file.text) {
            let from = &here[0];
            let to = reexported.get(&reference.target[0]).unwrap_or(&reference.target[0]);
            if from == to {
                continue;
            }
            if !on_disk.contains(to.as_str()) {
                let name = to.clone();
                findings.push(Finding::UnknownTarget { file: file.path.clone(), line: reference.line, name });
                continue;
            }
            let (Some(&from_layer), Some(&to_layer)) = (layer_of.get(from.as_str()), layer_of.get(to.as_str())) else {
                continue; // reported as unlisted above
            };
            if to_layer >= from_layer {
                let (file, line) = (file.path.clone(), reference.line);
                let (from, to) = (from.clone(), to.clone());
                findings.push(Finding::Upward { file, line, from, from_layer, to, to_layer });
            }
        }
    }
    findings
}

/// What `lib.rs` re-exports (`pub use gauge::Gauge;`): `Gauge` → `gauge`, so
/// `crate::Gauge` counts as naming `gauge`.
fn root_reexports(files: &[SourceFile]) -> BTreeMap<String, String> {
    let Some(lib) = files.iter().find(|file| file.path == "lib.rs") else { return BTreeMap::new() };
    let code: Vec<char> = blank_comments_and_literals(&lib.text).chars().collect();
    let mut reexports = BTreeMap::new();
    let mut pos = 0;
    while pos < code.len() {
        let word = ident_at(&code, pos);
        if word == "use" && (pos == 0 || !is_ident(code[pos - 1])) {
            let mut cursor = Cursor { code: &code, pos: pos + word.len() };
            let mut paths = Vec::new();
            use_tree(&mut cursor, Vec::new(), &mut paths);
            for path in paths.iter().filter(|path| path.len() > 1) {
                reexports.insert(path[path.len() - 1].0.clone(), path[0].0.clone());
            }
            pos = cursor.pos;
        }
        pos += word.len().max(1);
    }
    reexports
}

// ---- the cycle check --------------------------------------------------------------------

/// Edges between modules of the same top-level module, each file and each inline module
/// (`mod tests {…}`) a node: a test module sits on top of what it tests, not inside it.
/// A module naming its own submodules (declaring and re-exporting them) is no edge: only
/// reaching a sibling or an ancestor counts, so `mod.rs` with its children is never a cycle.
pub(super) fn cycle_findings(files: &[SourceFile]) -> Vec<Finding> {
    let modules = module_paths(files);
    let mut nodes: BTreeMap<Vec<String>, String> =
        modules.iter().map(|(file, module)| (module.clone(), file.clone())).collect();
    let mut found = Vec::new();
    for file in files {
        let Some(here) = modules.get(&file.path) else { continue };
        for reference in references(here, &file.text) {
            nodes.entry(reference.from.clone()).or_insert_with(|| file.path.clone());
            found.push(reference);
        }
    }
    let mut edges: BTreeMap<Vec<String>, Vec<(Vec<String>, usize)>> = BTreeMap::new();
    for reference in found {
        let target = (1..=reference.target.len())
            .rev()
            .map(|len| &reference.target[..len])
            .find(|prefix| nodes.contains_key(*prefix));
        let Some(target) = target.map(<[String]>::to_vec) else { continue };
        if target[0] == reference.from[0] && !target.starts_with(&reference.from) {
            edges.entry(reference.from).or_default().push((target, reference.line));
        }
    }
    let mut findings = Vec::new();
    for (from, targets) in &edges {
        for (to, line) in targets {
            if reaches(&edges, to, from) {
                let (file, to_file) = (nodes[from].clone(), nodes[to].clone());
                let (from, to) = (from.join("::"), to.join("::"));
                findings.push(Finding::Cycle { file, line: *line, from, to, to_file });
            }
        }
    }
    findings
}

fn reaches(edges: &BTreeMap<Vec<String>, Vec<(Vec<String>, usize)>>, start: &[String], goal: &[String]) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![start];
    while let Some(node) = stack.pop() {
        if node == goal {
            return true;
        }
        if seen.insert(node) {
            stack.extend(edges.get(node).into_iter().flatten().map(|(to, _)| to.as_slice()));
        }
    }
    false
}
// ---- finding references -----------------------------------------------------------------

/// A path a file names, resolved to an absolute module path (`["worker", "QueueMode"]`).
struct Reference {
    line: usize,
    /// The module whose code names it: the file's, or an inline module's in it.
    from: Vec<String>,
    target: Vec<String>,
}

/// Every `crate::…`, `super::…` and `self::…` path in the code of a file of `module`,
/// grouped imports (`use crate::{a, b::{c, d}}`) expanded. Inline modules (`mod tests {…}`)
/// are tracked so their `super` means the file's own module.
fn references(module: &[String], text: &str) -> Vec<Reference> {
    let code: Vec<char> = blank_comments_and_literals(text).chars().collect();
    let mut references = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut pos = 0;
    while pos < code.len() {
        let c = code[pos];
        if c == '{' {
            depth += 1;
        } else if c == '}' {
            depth -= 1;
            if inline.last().is_some_and(|(_, opened_at)| *opened_at == depth) {
                inline.pop();
            }
        } else if is_ident_start(c) && (pos == 0 || !is_ident(code[pos - 1])) {
            let word = ident_at(&code, pos);
            if word == "mod"
                && let Some((name, brace)) = inline_module(&code, pos + word.len())
            {
                inline.push((name, depth));
                pos = brace;
                continue;
            }
            if matches!(word.as_str(), "crate" | "super" | "self") && starts_path(&code, pos, word.len()) {
                let here: Vec<String> =
                    module.iter().cloned().chain(inline.iter().map(|(name, _)| name.clone())).collect();
                let mut cursor = Cursor { code: &code, pos };
                let mut paths = Vec::new();
                use_tree(&mut cursor, Vec::new(), &mut paths);
                for segments in paths {
                    let at = segments.last().map_or(pos, |(_, at)| *at);
                    if let Some(target) = resolve(&here, &segments).filter(|target| !target.is_empty()) {
                        let from = here.clone();
                        references.push(Reference { line: line_of(&code, at), from, target });
                    }
                }
                pos = cursor.pos.max(pos + word.len());
                continue;
            }
            pos += word.len();
            continue;
        }
        pos += 1;
    }
    references
}

/// `crate`/`super`/`self` at `pos` begins a path: `::` follows, and it is not a macro's
/// `$crate` nor the tail of another path.
fn starts_path(code: &[char], pos: usize, len: usize) -> bool {
    let after = skip_space(code, pos + len);
    let before: String = code[..pos].iter().rev().filter(|c| !c.is_whitespace()).take(2).collect();
    code.get(after..after + 2) == Some(&[':', ':']) && !before.starts_with('$') && before != "::"
}

/// After `mod`: the module's name and the position of its `{`, if it is an inline module.
fn inline_module(code: &[char], pos: usize) -> Option<(String, usize)> {
    let start = skip_space(code, pos);
    let name = ident_at(code, start);
    let brace = skip_space(code, start + name.len());
    (!name.is_empty() && code.get(brace) == Some(&'{')).then_some((name, brace))
}

/// Turns `super`/`self`/`crate` paths into absolute module paths; `None` for paths that
/// are not relative to this crate or climb above its root.
fn resolve(here: &[String], segments: &[(String, usize)]) -> Option<Vec<String>> {
    let (first, rest) = segments.split_first()?;
    let mut absolute = match first.0.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => here.split_last()?.1.to_vec(),
        _ => return None,
    };
    for (segment, _) in rest {
        match segment.as_str() {
            "super" => {
                absolute.pop()?;
            }
            "self" => {}
            _ => absolute.push(segment.clone()),
        }
    }
    Some(absolute)
}

struct Cursor<'a> {
    code: &'a [char],
    pos: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        self.pos = skip_space(self.code, self.pos);
    }

    fn peek(&self) -> Option<char> {
        self.code.get(self.pos).copied()
    }

    fn eat(&mut self, text: &str) -> bool {
        let start = skip_space(self.code, self.pos);
        let wanted: Vec<char> = text.chars().collect();
        let matched = self.code.get(start..start + wanted.len()) == Some(&wanted[..]);
        if matched {
            self.pos = start + wanted.len();
        }
        matched
    }

    fn ident(&mut self) -> Option<(String, usize)> {
        self.skip_space();
        let word = ident_at(self.code, self.pos);
        let at = self.pos;
        self.pos += word.len();
        (!word.is_empty()).then_some((word, at))
    }
}

/// Reads a path or use tree at the cursor; every full path goes into `out` (segments with
/// their positions). `prefix` is what an enclosing group put before it.
fn use_tree(cursor: &mut Cursor<'_>, mut prefix: Vec<(String, usize)>, out: &mut Vec<Vec<(String, usize)>>) {
    if cursor.eat("{") {
        while !cursor.eat("}") && cursor.peek().is_some() {
            use_tree(cursor, prefix.clone(), out);
            skip_to_item_end(cursor);
            cursor.eat(",");
        }
        return;
    }
    if cursor.eat("*") {
        out.push(prefix);
        return;
    }
    let Some(first) = cursor.ident() else {
        out.push(prefix);
        return;
    };
    prefix.push(first);
    loop {
        let before = cursor.pos;
        if !cursor.eat("::") {
            break;
        }
        cursor.skip_space();
        if matches!(cursor.peek(), Some('{' | '*')) {
            return use_tree(cursor, prefix, out);
        }
        match cursor.ident() {
            Some(segment) => prefix.push(segment),
            None => {
                cursor.pos = before; // `::<T>` and the like end the path
                break;
            }
        }
    }
    out.push(prefix);
}

/// Skips what follows an item of a use group (`as alias`) up to its `,` or `}`.
fn skip_to_item_end(cursor: &mut Cursor<'_>) {
    let mut depth = 0usize;
    while let Some(c) = cursor.peek() {
        match c {
            ',' | '}' if depth == 0 => return,
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        cursor.pos += 1;
    }
}

fn skip_space(code: &[char], mut pos: usize) -> usize {
    while code.get(pos).is_some_and(|c| c.is_whitespace()) {
        pos += 1;
    }
    pos
}

fn ident_at(code: &[char], pos: usize) -> String {
    if !code.get(pos).is_some_and(|c| is_ident_start(*c)) {
        return String::new();
    }
    code[pos..].iter().take_while(|c| is_ident(**c)).collect()
}

fn is_ident_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn line_of(code: &[char], pos: usize) -> usize {
    code[..pos].iter().filter(|c| **c == '\n').count() + 1
}

// ---- blanking comments and literals -----------------------------------------------------

/// `text` with comments and the insides of string and char literals replaced by spaces
/// (line breaks kept), so only code is left and positions still map to lines.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = chars.clone();
    let mut pos = 0;
    while pos < chars.len() {
        let end = literal_or_comment_end(&chars, pos);
        if end > pos {
            for c in &mut out[pos..end] {
                if *c != '\n' {
                    *c = ' ';
                }
            }
            pos = end;
        } else {
            pos += 1;
        }
    }
    out.into_iter().collect()
}

/// Where the comment or literal starting at `pos` ends; `pos` itself if none starts there.
fn literal_or_comment_end(chars: &[char], pos: usize) -> usize {
    let at = |offset: usize| chars.get(pos + offset).copied();
    let after_ident = pos > 0 && is_ident(chars[pos - 1]);
    match (at(0), at(1)) {
        (Some('/'), Some('/')) => chars[pos..].iter().position(|c| *c == '\n').map_or(chars.len(), |n| pos + n),
        (Some('/'), Some('*')) => block_comment_end(chars, pos),
        (Some('"'), _) => quoted_end(chars, pos + 1, '"'),
        (Some('\''), Some('\\')) => quoted_end(chars, pos + 1, '\''),
        (Some('\''), Some(_)) if at(2) == Some('\'') => pos + 3,
        (Some('r'), Some('#' | '"')) if !after_ident || raw_prefix(chars, pos) => raw_string_end(chars, pos + 1),
        _ => pos,
    }
}

/// `br"…"` / `cr"…"`: the `r` follows a one-letter prefix.
fn raw_prefix(chars: &[char], pos: usize) -> bool {
    matches!(chars[pos - 1], 'b' | 'c') && (pos < 2 || !is_ident(chars[pos - 2]))
}

fn block_comment_end(chars: &[char], pos: usize) -> usize {
    let mut depth = 0;
    let mut i = pos;
    while i + 1 < chars.len() {
        match (chars[i], chars[i + 1]) {
            ('/', '*') => {
                depth += 1;
                i += 2;
            }
            ('*', '/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    chars.len()
}

/// The end of a quoted literal whose body starts at `pos`, escapes honoured.
fn quoted_end(chars: &[char], mut pos: usize, quote: char) -> usize {
    while pos < chars.len() {
        match chars[pos] {
            '\\' => pos += 2,
            c if c == quote => return pos + 1,
            _ => pos += 1,
        }
    }
    chars.len()
}

/// The end of `r#"…"#` with `pos` just after the `r`; `pos - 1` if no string starts there.
fn raw_string_end(chars: &[char], pos: usize) -> usize {
    let hashes = chars[pos..].iter().take_while(|c| **c == '#').count();
    if chars.get(pos + hashes) != Some(&'"') {
        return pos - 1;
    }
    let closing: Vec<char> = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
    let body = pos + hashes + 1;
    (body..chars.len()).find(|&i| chars[i..].starts_with(&closing)).map_or(chars.len(), |i| i + closing.len())
}
