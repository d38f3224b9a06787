//! What a sectioned benchmark binary does before its first figure: read which sections
//! the command line asks for, and say under what load the figures are measured.

/// The sections the command line selects: `cargo bench` passes `--bench`, and anything not
/// starting with `-` names sections by a part of their name; none named selects all.
pub struct Selection(Vec<String>);

impl Selection {
    /// Reads the command line; exits with the list of `sections` when a filter matches none.
    pub fn from_args(sections: &[&str]) -> Selection {
        let filters = Selection(
            std::env::args()
                .skip(1)
                .filter(|a| !a.starts_with('-'))
                .collect(),
        );
        if !sections.iter().any(|s| filters.has(s)) {
            eprintln!(
                "no section matches {:?}; sections: {}",
                filters.0,
                sections.join(", ")
            );
            std::process::exit(2);
        }
        filters
    }

    /// Whether the section `name` runs.
    pub fn has(&self, name: &str) -> bool {
        self.0.is_empty() || self.0.iter().any(|f| name.contains(f.as_str()))
    }
}

/// The CPUs and the load average (1, 5, 15 min) the figures are measured under.
pub fn machine() -> (usize, String) {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load: Vec<&str> = load.split_whitespace().take(3).collect();
    (cpus, load.join(" "))
}
