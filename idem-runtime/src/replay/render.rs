//! Records as text for operators: JSON where JSON can say it, annotated where it cannot.

use std::fmt::Write;

use super::node::Node;

/// Writes `node` at indentation `indent` (two spaces a level); containers with elements get
/// one element a line. Map keys are written on one line.
pub(super) fn write_node(out: &mut String, node: &Node<'_>, indent: usize) {
    match node {
        Node::None => out.push_str("null"),
        // `Some(x)` is shown as `x`, as JSON would, unless that would hide a level of `Option`
        // or read as `null`.
        Node::Some(inner) => match **inner {
            Node::None | Node::Some(_) | Node::Unit => {
                out.push_str("Some(");
                write_node(out, inner, indent);
                out.push(')');
            }
            _ => write_node(out, inner, indent),
        },
        Node::Unit => out.push_str("()"),
        Node::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Node::U8(v) => push_display(out, v),
        Node::U16(v) => push_display(out, v),
        Node::U32(v) => push_display(out, v),
        Node::U64(v) => push_display(out, v),
        Node::U128(v) => push_display(out, v),
        Node::I8(v) => push_display(out, v),
        Node::I16(v) => push_display(out, v),
        Node::I32(v) => push_display(out, v),
        Node::I64(v) => push_display(out, v),
        Node::I128(v) => push_display(out, v),
        Node::F32(bits) => {
            let v = f32::from_bits(*bits);
            if v.is_nan() && *bits != f32::NAN.to_bits() {
                let _ = write!(out, "NaN(bits {bits:#010x})");
            } else {
                // Rust's shortest round-trip form: `1.0`, `-0.0`, `1e30`, `NaN`, `inf`, `-inf`.
                let _ = write!(out, "{v:?}");
            }
        }
        Node::F64(bits) => {
            let v = f64::from_bits(*bits);
            if v.is_nan() && *bits != f64::NAN.to_bits() {
                let _ = write!(out, "NaN(bits {bits:#018x})");
            } else {
                let _ = write!(out, "{v:?}");
            }
        }
        Node::Char(c) => {
            let _ = write!(out, "{c:?}");
        }
        Node::Str(s) => push_str_literal(out, s),
        Node::Bytes(bytes) => {
            out.push_str("hex\"");
            out.push_str(&hex::encode(bytes));
            out.push('"');
        }
        // A set reads as the JSON array it serializes to elsewhere.
        Node::Seq(elements) | Node::Set(elements) => {
            write_elements(out, "[", elements, "]", indent)
        }
        Node::Map(entries) => write_entries(out, entries, indent),
        Node::UnitVariant(name) => out.push_str(name),
        Node::NewtypeVariant(name, inner) => {
            out.push_str(name);
            out.push('(');
            write_node(out, inner, indent);
            out.push(')');
        }
        Node::TupleVariant(name, elements) => {
            out.push_str(name);
            write_elements(out, "(", elements, ")", indent);
        }
        Node::StructVariant(name, entries) => {
            out.push_str(name);
            out.push(' ');
            write_entries(out, entries, indent);
        }
    }
}

fn push_display(out: &mut String, v: &impl std::fmt::Display) {
    let _ = write!(out, "{v}");
}

fn push_str_literal(out: &mut String, s: &str) {
    match serde_json::to_string(s) {
        Ok(quoted) => out.push_str(&quoted),
        Err(_) => {
            let _ = write!(out, "{s:?}");
        }
    }
}

fn newline(out: &mut String, indent: usize) {
    out.push('\n');
    for _ in 0..indent {
        out.push_str("  ");
    }
}

fn write_elements(out: &mut String, open: &str, elements: &[Node<'_>], close: &str, indent: usize) {
    out.push_str(open);
    for (i, element) in elements.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        newline(out, indent + 1);
        write_node(out, element, indent + 1);
    }
    if !elements.is_empty() {
        newline(out, indent);
    }
    out.push_str(close);
}

/// A map: string keys quoted as in JSON; other keys (numbers, tuples, enums) written as
/// values, which is how a reader tells them apart.
fn write_entries(out: &mut String, entries: &[(Node<'_>, Node<'_>)], indent: usize) {
    out.push('{');
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        newline(out, indent + 1);
        write_key(out, key);
        out.push_str(": ");
        write_node(out, value, indent + 1);
    }
    if !entries.is_empty() {
        newline(out, indent);
    }
    out.push('}');
}

/// A key on one line: the pretty form with its line breaks and indentation folded.
fn write_key(out: &mut String, key: &Node<'_>) {
    let mut pretty = String::new();
    write_node(&mut pretty, key, 0);
    if !pretty.contains('\n') {
        out.push_str(&pretty);
        return;
    }
    let mut compact = String::with_capacity(pretty.len());
    for (i, line) in pretty.lines().enumerate() {
        let line = line.trim_start();
        let joins_tight = compact.ends_with(['[', '(', '{']) || line.starts_with([']', ')', '}']);
        if i > 0 && !joins_tight {
            compact.push(' ');
        }
        compact.push_str(line);
    }
    out.push_str(&compact);
}
