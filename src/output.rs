//! Writing a command's results to standard output: `out!` and `outln!` instead of
//! `print!`, so that a reader that goes away (`haptor plan a b | head -1`) ends the process
//! quietly instead of making it panic. A leaf module: it imports nothing of haptor, so the
//! command line and `haptor local` can both use it.

/// Writes to standard output; a closed output ends the process quietly instead of panicking
/// as `print!` does.
macro_rules! out {
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), false) };
}

/// [`out!`] with a trailing newline.
macro_rules! outln {
    () => { $crate::output::write_stdout(format_args!(""), true) };
    ($($arg:tt)*) => { $crate::output::write_stdout(format_args!($($arg)*), true) };
}

pub(crate) use {out, outln};

/// Writes formatted text (and a newline) to standard output; exits with success when the
/// reader has gone away (a closed pipe is not an error of haptor's).
pub fn write_stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout.write_fmt(args).and_then(|()| {
        if newline {
            stdout.write_all(b"\n")
        } else {
            Ok(())
        }
    });
    if written.is_err() {
        std::process::exit(0);
    }
}
