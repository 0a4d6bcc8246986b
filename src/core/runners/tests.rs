//! The runners' own unit tests: what each worker imports, and the sweep of dead folders.
use super::{preimports, problem_imports, sweep_dead};

/// The reference's zygote imports torch once when the problem's own Python does.
#[test]
fn torch_is_imported_ahead_when_the_reference_or_checks_import_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("reference.py"), "import numpy as np\n# no torch here, from torch's docs\n")
        .unwrap();
    std::fs::create_dir_all(dir.path().join("versions")).unwrap();
    std::fs::write(dir.path().join("versions/v001.py"), "import torch\n").unwrap();
    assert!(problem_imports(dir.path()).is_empty(), "a version's imports are not the problem's");
    std::fs::write(dir.path().join("my_ref.py"), "from rung import rung\n    from torch import nn\n").unwrap();
    assert_eq!(problem_imports(dir.path()), vec!["torch"]);
}

#[test]
fn the_zygote_preimports_inductor_when_the_problem_or_a_version_calls_for_it() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let none = Vec::<&str>::new();
    std::fs::create_dir(root.join("versions")).unwrap();
    std::fs::write(root.join("reference.py"), "def ref_kernel(data):\n    return data\n").unwrap();
    assert_eq!(preimports(root, false), none);
    // GPU MODE's utils.py: DeterministicContext, for the judge's zygote too.
    std::fs::write(root.join("utils.py"), "torch.use_deterministic_algorithms(True)\n").unwrap();
    assert_eq!(preimports(root, false), vec!["torch._inductor.config"]);
    assert_eq!(preimports(root, true), vec!["torch._inductor.config"]);
    // load_inline alone is no reason: cpp_extension is never preimported.
    std::fs::remove_file(root.join("utils.py")).unwrap();
    std::fs::write(root.join("versions").join("v001.py"), "from torch.utils.cpp_extension import load_inline\n")
        .unwrap();
    assert_eq!(preimports(root, false), none);
    std::fs::write(root.join("versions").join("v002.py"), "custom_kernel = torch.compile(f)\n").unwrap();
    assert_eq!(preimports(root, false), vec!["torch._inductor.config", "torch._inductor.compile_fx"]);
    assert_eq!(preimports(root, true), none, "a version's torch.compile is not the judge's");
}

/// A data folder of a rung that is gone is removed; this process's, and anything that is
/// not rung's, stay.
#[test]
fn dead_rungs_data_folders_are_swept() {
    let tmp = tempfile::tempdir().unwrap();
    let dead = tmp.path().join("rung-999999999-0");
    let mine = tmp.path().join(format!("rung-{}-7", std::process::id()));
    let other = tmp.path().join("rung-notapid");
    for d in [&dead, &mine, &other] {
        std::fs::create_dir_all(d.join("inner")).unwrap();
    }
    sweep_dead(tmp.path());
    assert!(!dead.exists() && mine.exists() && other.exists());
}
