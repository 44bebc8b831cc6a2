//! Unit tests of the sandbox policy: what is hidden, granted and named.

use super::*;

#[test]
fn readable_roots_skip_exactly_the_denied_paths() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().canonicalize().unwrap();
    for d in [".ssh", "work", ".config/gcloud", ".config/fish"] {
        std::fs::create_dir_all(h.join(d)).unwrap();
    }
    std::fs::write(h.join(".netrc"), "x").unwrap();
    std::fs::write(h.join(".bashrc"), "x").unwrap();
    std::os::unix::fs::symlink(h.join(".ssh"), h.join("keys")).unwrap();
    let deny = vec![h.join(".ssh"), h.join(".netrc"), h.join(".config/gcloud")];
    let roots = readable_roots(&deny);
    for want in [h.join("work"), h.join(".bashrc"), h.join(".config/fish")] {
        assert!(roots.contains(&want), "{want:?} missing from {roots:?}");
    }
    for d in &deny {
        assert!(
            !roots.iter().any(|r| r.starts_with(d) || d.starts_with(r)),
            "{d:?}"
        );
    }
    assert!(
        !roots.contains(&h.join("keys")),
        "a link into .ssh is not granted"
    );
}

#[test]
fn a_denial_names_the_path_or_the_address() {
    let sb = Sandbox {
        mode: SandboxMode::Workspace,
        writable: Vec::new(),
        network: false,
    };
    let hint = denial(&sb, "cat: /h/.ssh/id_ed25519: Permission denied\n").unwrap();
    assert!(hint.contains("`/h/.ssh/id_ed25519`"), "{hint}");
    let hint = denial(&sb, "PermissionError: [Errno 13] Permission denied").unwrap();
    assert!(hint.contains("network = false"), "{hint}");
    let hint = denial(&sb, "connect 127.0.0.1:8080: Permission denied").unwrap();
    assert!(hint.contains("127.0.0.1:8080"), "{hint}");
    assert_eq!(denial(&sb, "no such file"), None);
}
