// The self-test's embedded fixtures (include_dir!) must be re-embedded when their files change.
fn main() {
    println!("cargo:rerun-if-changed=tests/fixtures");
}
