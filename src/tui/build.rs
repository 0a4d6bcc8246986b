// The themes (include_dir!) must be re-embedded when their files change.
fn main() {
    println!("cargo:rerun-if-changed=../../themes");
}
