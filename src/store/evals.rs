//! Eval results (`agentrun eval`, docs/testing-changes.md): one row per eval and one per
//! slot (task × model × repeat). A slot names its run as soon as the run exists and
//! its scored result once the run has ended, so an eval killed at any point resumes
//! from the slots it had: runs already scored are not run again, runs begun are
//! resumed, not started anew.

/// One eval: its name (unique), the suite file and its plan (JSON: tasks, models,
/// repeats, as resolved when it began).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalRow {
    pub name: String,
    pub suite: String,
    pub plan: String,
    pub created_at: i64,
    pub finished_at: Option<i64>,
}

/// Where one run of an eval is: the key of its slot, its run once created, and its
/// scored result (JSON) once finished.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalSlotRow {
    pub task: String,
    pub model: String,
    pub repeat: u32,
    pub run_id: Option<String>,
    pub result: Option<String>,
}

/// A slot's key.
#[derive(Debug, Clone, Copy)]
pub struct SlotKey<'a> {
    pub eval: &'a str,
    pub task: &'a str,
    pub model: &'a str,
    pub repeat: u32,
}
