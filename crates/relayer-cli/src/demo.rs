//! `relayer demo`: the end-to-end run against a real PostgreSQL.
//!
//! It grows with the product. Today it applies the schema to a demo namespace and shows
//! its status.

use crate::args::Args;
use crate::status;
use crate::{CliResult, connect};

pub(crate) async fn run(args: &Args) -> CliResult {
    println!("relayer demo on namespace {}", args.namespace);
    println!("[1/2] applying the schema");
    status::apply(args).await?;
    println!("[2/2] status");
    let client = connect(args).await?;
    let snapshot = relayer_postgres::namespace_status(&client, &args.namespace).await?;
    print!("{}", status::render(&args.namespace.to_string(), &snapshot));
    println!("summary: schema version {:?}, {} pending", snapshot.schema_version, snapshot.outbox_pending);
    Ok(())
}
