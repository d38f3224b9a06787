//! The `.deb` that `cargo deb` builds from `[package.metadata.deb]`: built here from the
//! debug binary the suite already has (`--no-build`; a release build takes minutes), then
//! read back with `dpkg-deb --contents` and `--info`. Never installed. Needs `cargo-deb`
//! (tests/run.sh installs the pinned version) and `dpkg-deb`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_toolhost");

/// `cargo-deb` on PATH, else in Cargo's bin folder.
fn cargo_deb() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("cargo-deb"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    on_path
        .into_iter()
        .chain(cargo_home.map(|h| h.join("bin/cargo-deb")))
        .find(|p| p.is_file())
        .expect("cargo-deb is not installed: run tests/run.sh, which installs the pinned version")
}

fn dpkg_deb(args: &[&str], deb: &Path) -> String {
    let out = Command::new("dpkg-deb")
        .args(args)
        .arg(deb)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dpkg-deb {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn cargo_deb_packages_the_binary_the_units_and_the_example_config() {
    let tmp = tempfile::tempdir().unwrap();
    // cargo-deb takes `target/release/toolhost` from the target directory: give it one
    // whose release binary is the debug build.
    let target = tmp.path().join("target");
    std::fs::create_dir_all(target.join("release")).unwrap();
    std::os::unix::fs::symlink(BIN, target.join("release/toolhost")).unwrap();
    let bridge = Path::new(BIN).with_file_name("toolhost-bridge");
    std::os::unix::fs::symlink(bridge, target.join("release/toolhost-bridge")).unwrap();
    let out_dir = tmp.path().join("out");
    let built = Command::new(cargo_deb())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target)
        .args(["--no-build", "--fast", "--output"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "cargo deb: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let deb = out_dir.join(format!(
        "toolhost_{}-1_amd64.deb",
        env!("CARGO_PKG_VERSION")
    ));
    assert!(deb.is_file(), "{} missing", deb.display());

    let contents = dpkg_deb(&["--contents"], &deb);
    let entry = |path: &str| {
        contents
            .lines()
            .find(|l| l.ends_with(&format!(" ./{path}")))
            .unwrap_or_else(|| panic!("{path} not in the package:\n{contents}"))
            .to_owned()
    };
    // `toolhost mcp` runs the bridge from beside `toolhost`.
    for bin in ["usr/bin/toolhost", "usr/bin/toolhost-bridge"] {
        assert!(
            entry(bin).starts_with("-rwxr-xr-x root/root")
                || entry(bin).starts_with("-rwxr-xr-x 0/0")
        );
    }
    for unit in ["toolhost.service", "toolhost.socket"] {
        assert!(entry(&format!("usr/lib/systemd/system/{unit}")).starts_with("-rw-r--r--"));
    }
    entry("usr/share/doc/toolhost/config.example.json");
    entry("usr/share/doc/toolhost/copyright");
    assert!(
        !contents.contains("fixture"),
        "the test fixture is not shipped:\n{contents}"
    );
    // The unit runs the binary where the package puts it.
    let service = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/toolhost.service"),
    )
    .unwrap();
    assert!(
        service.contains("\nExecStart=/usr/bin/toolhost "),
        "{service}"
    );

    let info = dpkg_deb(&["--info"], &deb);
    for field in [
        "Package: toolhost".to_owned(),
        format!("Version: {}-1", env!("CARGO_PKG_VERSION")),
        "Architecture: amd64".to_owned(),
        "Section: devel".to_owned(),
    ] {
        assert!(info.contains(&field), "{field} missing:\n{info}");
    }
    let depends = info
        .lines()
        .find(|l| l.trim_start().starts_with("Depends:"))
        .unwrap_or_else(|| panic!("no Depends:\n{info}"));
    assert!(
        depends.contains("adduser") && depends.contains("libc6"),
        "{depends}"
    );
    // The postinst that creates the service's user and installs the module host's own
    // packages (zod, TypeBox) for every user when npm is there.
    assert!(info.contains(" postinst "), "{info}");
    let control = tmp.path().join("control");
    let extracted = Command::new("dpkg-deb")
        .arg("-e")
        .arg(&deb)
        .arg(&control)
        .output()
        .unwrap();
    assert!(extracted.status.success(), "{extracted:?}");
    let postinst = std::fs::read_to_string(control.join("postinst")).unwrap();
    assert!(
        postinst.contains("/usr/bin/toolhost modules setup --system"),
        "{postinst}"
    );
    let checked = Command::new("sh")
        .arg("-n")
        .arg(control.join("postinst"))
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "postinst is valid sh: {checked:?}"
    );
}
