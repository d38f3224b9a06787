//! Which workspace each live session is in: the one place that knows when a workspace
//! gains its first session (its tools, skills and commands are to be searched) and loses
//! its last (they and their watches are to go), so the daemon keeps only the projects open
//! now, never every project ever opened. `reload.rs` applies what it says to the sources.

use std::collections::HashMap;
use std::path::PathBuf;

/// What holds a workspace: a session, or a `session.create` under way (its workspace is
/// searched before the session exists, so its view records what the project brings).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    Session(String),
    Creating(u64),
}

/// The workspaces that gained their first holder, and those that lost their last.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub learn: Vec<PathBuf>,
    pub forget: Vec<PathBuf>,
}

/// The live sessions' workspaces, and how many hold each.
#[derive(Debug, Default)]
pub struct SessionWorkspaces {
    held: HashMap<Holder, PathBuf>,
    count: HashMap<PathBuf, usize>,
    next_creating: u64,
}

impl SessionWorkspaces {
    /// A holder for a `session.create` under way.
    pub fn creating(&mut self) -> Holder {
        self.next_creating += 1;
        Holder::Creating(self.next_creating)
    }

    /// Puts each holder in its workspace (`None`: it ended), out of the one it was in, in
    /// order; what the changes did as a whole (a creation handing its workspace to the
    /// session it made neither learns nor forgets it).
    pub fn set(&mut self, changes: Vec<(Holder, Option<PathBuf>)>) -> Moved {
        let mut moved = Moved::default();
        for (holder, workspace) in changes {
            let old = match &workspace {
                Some(w) => self.held.insert(holder, w.clone()),
                None => self.held.remove(&holder),
            };
            if old == workspace {
                continue;
            }
            if let Some(w) = old {
                let n = self.count.entry(w.clone()).or_default();
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.count.remove(&w);
                    toggle(&mut moved.forget, &mut moved.learn, w);
                }
            }
            if let Some(w) = workspace {
                let n = self.count.entry(w.clone()).or_default();
                *n += 1;
                if *n == 1 {
                    toggle(&mut moved.learn, &mut moved.forget, w);
                }
            }
        }
        moved
    }

    /// The workspaces held now.
    pub fn workspaces(&self) -> impl Iterator<Item = &PathBuf> {
        self.count.keys()
    }
}

/// Adds `w` to `to`, unless it is in `undone` (the same change done the other way earlier
/// in one set), where it is taken out instead.
fn toggle(to: &mut Vec<PathBuf>, undone: &mut Vec<PathBuf>, w: PathBuf) {
    match undone.iter().position(|u| *u == w) {
        Some(i) => {
            undone.remove(i);
        }
        None => to.push(w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: &str) -> Holder {
        Holder::Session(id.into())
    }

    #[test]
    fn a_workspace_is_learnt_with_its_first_holder_and_forgotten_with_its_last() {
        let (a, b) = (PathBuf::from("/a"), PathBuf::from("/b"));
        let mut ws = SessionWorkspaces::default();
        let moved = |learn: &[&PathBuf], forget: &[&PathBuf]| Moved {
            learn: learn.iter().map(|w| (*w).clone()).collect(),
            forget: forget.iter().map(|w| (*w).clone()).collect(),
        };
        let mut set = |h: Holder, w: Option<&PathBuf>| ws.set(vec![(h, w.cloned())]);
        assert_eq!(set(s("1"), Some(&a)), moved(&[&a], &[]));
        assert_eq!(set(s("2"), Some(&a)), moved(&[], &[]));
        assert_eq!(set(s("1"), Some(&a)), moved(&[], &[]));
        assert_eq!(set(s("1"), None), moved(&[], &[]));
        assert_eq!(set(s("1"), None), moved(&[], &[]));
        // A session that moves leaves its old workspace, the last one there.
        assert_eq!(set(s("2"), Some(&b)), moved(&[&b], &[&a]));
        assert_eq!(ws.workspaces().collect::<Vec<_>>(), [&b]);
        // A creation holds its workspace until the session takes over.
        let c = ws.creating();
        assert_eq!(
            ws.set(vec![(c.clone(), Some(a.clone()))]),
            moved(&[&a], &[])
        );
        let handed = vec![(s("3"), Some(a.clone())), (c, None)];
        assert_eq!(ws.set(handed), moved(&[], &[]));
        // A failed creation gives its workspace back; in one set, nothing moved.
        let c = ws.creating();
        let failed = vec![(c.clone(), Some(PathBuf::from("/c"))), (c, None)];
        assert_eq!(ws.set(failed), moved(&[], &[]));
        assert_eq!(ws.set(vec![(s("2"), None)]), moved(&[], &[&b]));
        assert_eq!(ws.set(vec![(s("3"), None)]), moved(&[], &[&a]));
        assert_eq!(ws.workspaces().count(), 0);
    }
}
