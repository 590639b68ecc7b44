//! HAProxy configuration handling written for haptor: a tokenizer and parser that keep line
//! numbers, a structured view of what deployment needs, a serializer that round-trips, and
//! the schema check (which directives and parameters each section allows).

pub mod keywords;
