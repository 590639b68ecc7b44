//! HAProxy configuration handling written for haptor: a tokenizer and parser that keep line
//! numbers, a structured view of what deployment needs, a serializer that round-trips, and
//! the schema check (which directives and parameters each section allows).
//!
//! Entry points: [`parse_config`] turns text into a [`Config`] (or a [`ParseError`] naming the
//! line); `config.to_string()` writes it back; [`view()`] extracts frontends, backends, servers
//! and referenced files; [`check_schema`] lists [`SchemaProblem`]s against HAProxy 2.6's
//! keyword tables in [`keywords`].

pub mod ast;
pub mod keywords;
pub mod parser;
pub mod schema;
pub mod view;

pub use ast::{
    Config, Directive, DirectiveKind, LayoutLine, Section, SectionKind, SpanKind, WordSpan,
};
pub use parser::{ParseError, parse_config};
pub use schema::{SchemaProblem, check_schema};
pub use view::{ConfigView, view};
