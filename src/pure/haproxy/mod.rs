//! HAProxy configuration handling written for haptor: a tokenizer and parser that keep line
//! numbers, a structured view of what deployment needs, a serializer that round-trips, and
//! the schema check (which directives and parameters each section allows).
//!
//! Entry points: [`parse_config`] turns text into a [`Config`] (or a [`ParseError`] naming the
//! line); `config.to_string()` writes it back; [`view()`] extracts frontends, backends, servers
//! and referenced files; [`check_schema`] lists [`SchemaProblem`]s against HAProxy 2.6's
//! keyword tables in [`keywords`] ([`check_schema_for`] for a target's [`HaproxyVersion`],
//! with what later versions added in [`versions`]); [`check_code_running`] (in [`guard`]) refuses directives
//! that run code at parse or check time unless the config's templates wrote their line
//! literally ([`TrustedLines`]).
//!
//! Two definitions everything else here builds on sit at the bottom and import nothing of
//! this module: [`sections`] (which words open a section, [`SectionKind`]) and [`words`]
//! (word markers and the one rule for quoting a word, [`quote_word`]). Above them `ast` and
//! `versions`, then `parser`, `keywords`, `schema`, `guard` and `view`; outside tests, no module imports one
//! above it.

pub mod ast;
pub mod guard;
pub mod keywords;
pub mod parser;
pub mod schema;
pub mod sections;
pub mod versions;
pub mod view;
pub mod words;

pub use ast::{Config, Directive, DirectiveKind, LayoutLine, Section};
pub use guard::{TrustedLines, check_code_running};
pub use parser::{ParseError, parse_config};
pub use schema::{SchemaProblem, check_schema, check_schema_for};
pub use sections::{SectionKind, is_section_keyword};
pub use versions::HaproxyVersion;
pub use view::{ConfigView, view};
pub use words::{SpanKind, WordSpan, quote_word};
