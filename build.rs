//! `sqlx::migrate!` embeds the migration files when the crate compiles, but cargo does not
//! know to recompile when a file is added there: without this, a new migration would be left
//! out of the binary until some other change rebuilt it.
fn main() {
    println!("cargo:rerun-if-changed=src/store/sqlite/migrations");
    println!("cargo:rerun-if-changed=src/store/postgres/migrations");
}
