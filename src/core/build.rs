// Embedded workspaces, scripts and notes (include_dir!) must be re-embedded when their files change.
fn main() {
    println!("cargo:rerun-if-changed=../../assets");
    println!("cargo:rerun-if-changed=../../context");
}
