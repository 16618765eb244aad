//! relayer's developer commands.
fn main() {}
